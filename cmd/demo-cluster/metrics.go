package main

import (
	"net/http"

	"github.com/ringlimit/ringlimit/metrics"
	"github.com/ringlimit/ringlimit/node"
)

// metrics serves the node's, the middleware's and the rules' Prometheus
// series (package metrics) at GET /metrics.
func (a *api) metrics() http.Handler {
	var n *node.Node
	if rn, ok := a.node.(realNode); ok {
		n = rn.Node
	}
	h, err := metrics.Handler(n, a.mw, a.rules)
	if err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		})
	}
	return h
}
