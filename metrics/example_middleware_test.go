package metrics_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/metrics"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/rules"
)

// The series of a node, of the middleware in front of its API and of the
// rules file it reloads, on the service's own registry (docs/operations.md's
// snippet, from mw on).
func ExampleRegisterMiddleware() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the rules watcher
	n, err := node.New(node.Config{Name: "api-1", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0"})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	dir, err := os.MkdirTemp("", "rules")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(file, []byte("rules:\n  - endpoint: /api/posts\n    limit: 1\n    window: 60s\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	w, err := rules.Watch(ctx, file, rules.WatchConfig{})
	if err != nil {
		log.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "posted\n") })
	mux := http.NewServeMux()

	mw := httplimit.NewMiddleware(n, httplimit.WithRules(w)) // n *node.Node, w *rules.Watcher
	mux.Handle("/api/", mw.Handler(api))                     // the limited API

	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	if err := errors.Join(
		metrics.Register(reg, n),
		metrics.RegisterMiddleware(reg, mw),
		metrics.RegisterWatcher(reg, w),
	); err != nil {
		log.Fatal(err)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// or, without a registry of its own: h, err := metrics.Handler(n, mw, w)

	for range 2 {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/api/posts", nil))
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for sc := bufio.NewScanner(rec.Body); sc.Scan(); {
		if l := sc.Text(); strings.HasPrefix(l, "ringlimit_http_requests_total{") || strings.HasPrefix(l, "ringlimit_rules ") {
			fmt.Println(l)
		}
	}
	// Output:
	// ringlimit_http_requests_total{result="allowed",rule="/api/posts"} 1
	// ringlimit_http_requests_total{result="denied",rule="/api/posts"} 1
	// ringlimit_http_requests_total{result="shadow_denied",rule="/api/posts"} 0
	// ringlimit_rules 1
}
