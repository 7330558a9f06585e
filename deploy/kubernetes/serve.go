package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/metrics"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/rules"
)

// builtinRules are the rules in force without -rules: those of
// configmap.yaml, so the image alone behaves as the manifests' pods do.
const builtinRules = `rules:
  - name: api
    match: {path: /api/}
    key: header:X-Api-Key
    algorithm: sliding_window
    limit: 100
    window: 1m
  - name: login
    match: {method: POST, path: /login}
    key: ip
    algorithm: sliding_log
    limit: 5
    window: 1m
`

func run(c config) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	a, err := start(ctx, c, log)
	if err != nil {
		return err
	}
	log.Info("serving", "http", a.ln.Addr().String(), "node", c.name, "join", c.join, "valkey", c.valkey,
		"rules", c.rules, "trusted_proxies", len(c.trusted), "max_conns", c.maxConns, "idle_timeout", c.idle.String())
	served := make(chan error, 1)
	go func() { served <- a.srv.Serve(a.ln) }()
	select {
	case <-ctx.Done(): // SIGTERM
	case err := <-served:
		return errors.Join(err, a.n.Close())
	}
	log.Info("draining", "for", c.drain.String())
	return a.shutdown(c, time.Sleep)
}

// app is the running service: a node behind the HTTP server.
type app struct {
	n     *node.Node
	srv   *http.Server
	ln    *capListener
	ready readiness
}

// start loads the rules, starts the node and listens on c.http; the caller
// serves a.ln with a.srv. Reloading the rules file stops when ctx is done.
func start(ctx context.Context, c config, log *slog.Logger) (*app, error) {
	var src httplimit.RuleSource
	var w *rules.Watcher
	if c.rules == "" {
		set, err := rules.Parse([]byte(builtinRules))
		if err != nil {
			return nil, err
		}
		src = set
	} else {
		var err error
		if w, err = rules.Watch(ctx, c.rules, rules.WatchConfig{Interval: 5 * time.Second, Logger: log}); err != nil {
			return nil, err
		}
		src = w
	}
	n, err := node.New(c.nodeConfig(log))
	if err != nil {
		return nil, err
	}
	a := &app{n: n}
	a.ready.n = n
	mw := httplimit.NewMiddleware(n, httplimit.WithRules(src),
		httplimit.WithClientIP(httplimit.ClientIP{TrustedProxies: c.trusted}), httplimit.WithLogger(log))
	h, err := handler(&a.ready, n, mw, w)
	var ln net.Listener
	if err == nil {
		ln, err = net.Listen("tcp", c.http)
	}
	if err != nil {
		return nil, errors.Join(err, n.Close())
	}
	a.ln = capConns(ln, c.maxConns)
	a.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: c.idle}
	return a, nil
}

// shutdown is what SIGTERM does. /readyz answers 503 at once, while the
// node still decides and the server still serves: the load balancers stop
// sending new requests within c.drain (wait sleeps it). Then the server
// finishes the requests in flight (they still need the node), and only then
// does the node hand its keys to the other replicas and leave.
func (a *app) shutdown(c config, wait func(time.Duration)) error {
	a.ready.draining.Store(true)
	wait(c.drain)
	ctx, cancel := context.WithTimeout(context.Background(), c.grace)
	defer cancel()
	serr := a.srv.Shutdown(ctx)
	return errors.Join(serr, a.n.Close())
}

// readier is what the probes need of the node.
type readier interface{ Ready() bool }

// readiness is the node's Ready until the service starts draining.
type readiness struct {
	n        readier
	draining atomic.Bool
}

func (r *readiness) Ready() bool { return !r.draining.Load() && r.n.Ready() }

// handler serves the probes and /metrics unlimited, and everything else
// behind the rules.
func handler(ready readier, n *node.Node, mw *httplimit.Middleware, w *rules.Watcher) (http.Handler, error) {
	m, err := metrics.Handler(n, mw, w)
	if err != nil {
		return nil, err
	}
	api := http.NewServeMux()
	api.HandleFunc("/", func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, "ok\n") })
	mux := http.NewServeMux()
	probes(mux, ready)
	mux.Handle("GET /metrics", m)
	mux.Handle("/", mw.Handler(api))
	return mux, nil
}

// probes adds /healthz and /readyz to mux.
func probes(mux *http.ServeMux, n readier) {
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, "ok\n") })
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if !n.Ready() {
			http.Error(rw, "not ready: not joined yet, or draining", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(rw, "ready\n")
	})
}
