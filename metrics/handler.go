package metrics

import (
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/rules"
)

// Handler returns an http.Handler that serves, in the Prometheus exposition
// formats, a new registry holding the series of n, m and w (each may be nil,
// and is then left out) and the Go runtime's and the process's. It is for
// programs that do not keep a registry of their own; the others call
// Register, RegisterMiddleware and RegisterWatcher with theirs.
func Handler(n *node.Node, m *httplimit.Middleware, w *rules.Watcher) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	errs := []error{
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	}
	if n != nil {
		errs = append(errs, Register(reg, n))
	}
	if m != nil {
		errs = append(errs, RegisterMiddleware(reg, m))
	}
	if w != nil {
		errs = append(errs, RegisterWatcher(reg, w))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
