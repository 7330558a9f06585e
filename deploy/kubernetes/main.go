// Command kubernetes is the example service of deploy/kubernetes: an HTTP
// API whose requests are limited by rules from a ConfigMap, by a ringlimit
// node embedded in every replica. The replicas find each other through a
// headless Service (-join), keep state in Valkey (-valkey), report readiness
// at /readyz (node.Ready) and, on SIGTERM, stop taking requests, hand their
// keys to the other replicas (node.Close) and exit.
//
//	GET /healthz   200 while the process runs (liveness)
//	GET /readyz    200 once the node has joined the cluster, else 503
//	any other      limited by the rules file, then "ok"
//
// The gossip secret comes from the environment (RINGLIMIT_SECRET, hex of 16,
// 24 or 32 bytes); the node name from -name, else POD_NAME, else the host
// name; the address peers reach it at from -advertise, else POD_IP.
//
// See the README's "Kubernetes" section, and the manifests beside this file.
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/rules"
)

// SecretEnv names the environment variable that holds the hex secret key.
const SecretEnv = "RINGLIMIT_SECRET"

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Getenv)
	if err == nil {
		err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ringlimit-example:", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	name      string
	http      string // HTTP listen host:port
	gossip    string // gossip listen host:port
	rpc       string // peer RPC listen host:port
	advertise string // IP the peers reach this replica at; "" for the bound one
	join      []string
	valkey    []string
	rules     string
	secret    []byte
	grace     time.Duration
}

// parseFlags reads args; getenv supplies POD_NAME, POD_IP and the secret.
func parseFlags(args []string, getenv func(string) string) (config, error) {
	fs := flag.NewFlagSet("ringlimit-example", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c config
	var join, valkey string
	fs.StringVar(&c.name, "name", "", "node name, unique in the cluster (default $POD_NAME, else the host name)")
	fs.StringVar(&c.http, "http", ":8080", "HTTP listen address (API and probes)")
	fs.StringVar(&c.gossip, "gossip", ":7946", "gossip listen address (TCP and UDP)")
	fs.StringVar(&c.rpc, "rpc", ":7947", "peer RPC listen address")
	fs.StringVar(&c.advertise, "advertise", "", "IP address peers reach this replica at (default $POD_IP)")
	fs.StringVar(&join, "join", "", "comma-separated gossip addresses or names to join (the headless Service, host:port)")
	fs.StringVar(&valkey, "valkey", "", "comma-separated Valkey addresses (a cluster's seeds are enough); empty: no store")
	fs.StringVar(&c.rules, "rules", "/etc/ringlimit/rules.yaml", "rules file (reloaded when it changes)")
	fs.DurationVar(&c.grace, "shutdown-timeout", 10*time.Second, "how long SIGTERM waits for requests in flight")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, a := range []string{c.http, c.gossip, c.rpc} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return c, err
		}
	}
	if c.name == "" {
		c.name = getenv("POD_NAME")
	}
	if c.name == "" {
		c.name, _ = os.Hostname()
	}
	if c.advertise == "" {
		c.advertise = getenv("POD_IP")
	}
	if c.advertise != "" && net.ParseIP(c.advertise) == nil {
		return c, fmt.Errorf("-advertise %q is not an IP address", c.advertise)
	}
	c.join, c.valkey = list(join), list(valkey)
	secret, err := hex.DecodeString(strings.TrimSpace(getenv(SecretEnv)))
	if err != nil {
		return c, fmt.Errorf("%s: %w", SecretEnv, err)
	}
	c.secret = secret
	return c, nil
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// nodeConfig is the node's Config for c.
func (c config) nodeConfig(log *slog.Logger) node.Config {
	nc := node.Config{
		Name:        c.name,
		GossipAddr:  bindAll(c.gossip),
		RPCAddr:     bindAll(c.rpc),
		Join:        c.join,
		ValkeyAddrs: c.valkey,
		SecretKey:   c.secret,
		Logger:      log,
	}
	if c.advertise != "" {
		nc.GossipAdvertise = net.JoinHostPort(c.advertise, port(c.gossip))
		nc.RPCAdvertise = net.JoinHostPort(c.advertise, port(c.rpc))
	}
	return nc
}

// bindAll turns ":7946" into "0.0.0.0:7946" (the node wants an IP).
func bindAll(addr string) string {
	if h, p, _ := net.SplitHostPort(addr); h == "" {
		return net.JoinHostPort("0.0.0.0", p)
	}
	return addr
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func run(c config) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	w, err := rules.Watch(ctx, c.rules, rules.WatchConfig{Interval: 5 * time.Second, Logger: log})
	if err != nil {
		return err
	}
	n, err := node.New(c.nodeConfig(log))
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: c.http, Handler: handler(n, w), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	log.Info("serving", "http", c.http, "node", c.name, "join", c.join, "valkey", c.valkey)

	select {
	case <-ctx.Done(): // SIGTERM: Kubernetes has taken the pod out of the Service
	case err := <-served:
		n.Close()
		return err
	}
	// Finish the requests in flight (they still need the node), then hand
	// the node's keys to the other replicas and leave.
	sctx, cancel := context.WithTimeout(context.Background(), c.grace)
	defer cancel()
	serr := srv.Shutdown(sctx)
	return errors.Join(serr, n.Close())
}

// readier is what the probes need of the node.
type readier interface{ Ready() bool }

// handler serves the probes unlimited and everything else behind the rules.
func handler(n *node.Node, w *rules.Watcher) http.Handler {
	api := http.NewServeMux()
	api.HandleFunc("/", func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, "ok\n") })
	mux := http.NewServeMux()
	probes(mux, n)
	mux.Handle("/", httplimit.New(n, httplimit.WithRules(w))(api))
	return mux
}

// probes adds /healthz and /readyz to mux.
func probes(mux *http.ServeMux, n readier) {
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, "ok\n") })
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if !n.Ready() {
			http.Error(rw, "not ready: not joined yet", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(rw, "ready\n")
	})
}
