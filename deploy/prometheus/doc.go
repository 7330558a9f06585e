// Package prometheus holds alerts.yaml, Prometheus alert rules for
// ringlimit nodes; alerts_test.yaml, promtool's unit tests of them; and
// prometheus.yml, a plain scrape config under the job the rules select. It
// has no Go code. Its Go tests check that every rule names only series the
// metrics package exports (with label values they take) and links its
// runbook in docs/runbooks.md, that the unit tests keep a loaded healthy
// cluster quiet and see every alert fire, that the Prometheus Operator's
// manifests (deploy/kubernetes/monitoring/operator.yaml) carry the same rules and
// job, that every query of the Grafana dashboard (deploy/grafana) reads
// exported series and parses, and run promtool when it is installed; and
// that a real Prometheus (when installed) scraping three live nodes
// evaluates every rule without error and raises the member alerts when one
// goes.
package prometheus
