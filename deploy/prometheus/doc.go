// Package prometheus holds alerts.yaml, Prometheus alert rules for
// ringlimit nodes, and alerts_test.yaml, promtool's unit tests of them. It
// has no Go code: its Go test checks that every rule names only series the
// metrics package exports (with label values they take), and runs promtool
// when it is installed.
package prometheus
