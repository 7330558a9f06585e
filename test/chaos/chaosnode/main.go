// Command chaosnode runs one ringlimit node for the chaos tests: a node.Node
// on fixed loopback ports (so a restarted node keeps them) and an HTTP server
// that the test harness drives and inspects.
//
//	GET  /v1/allow?key=&algorithm=&limit=&window=&n=  one decision, as JSON
//	GET  /healthz                                     200 once the node runs
//	GET  /stats                                       node.Stats, members, goroutines, open fds
//	POST /chaos/partition?block=name@gossip,...       cut gossip and peer traffic to those nodes
//	POST /chaos/peers?block=name,...                  cut only the peer (RPC) links to those nodes
//	POST /chaos/heal                                  restore both
//
// With -clock-offset the node's Config.Clock runs that far from the system
// clock (test/netchaos's clock-skew scenarios). The secret key comes from the environment (CHAOSNODE_SECRET, hex). SIGTERM
// or SIGINT closes the node gracefully (it leaves the cluster) and exits 0.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// microTime logs times to the microsecond, so that the traces of several
// nodes on one machine interleave in order.
func microTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
		return slog.String(slog.TimeKey, a.Value.Time().UTC().Format("15:04:05.000000"))
	}
	return a
}

// SecretEnv names the environment variable that holds the hex secret key.
const SecretEnv = "CHAOSNODE_SECRET"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaosnode:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		name     = flag.String("name", "", "node name (required)")
		gossip   = flag.String("gossip", "", "gossip host:port (required, fixed)")
		rpc      = flag.String("rpc", "", "peer RPC host:port (required, fixed)")
		httpAddr = flag.String("http", "", "HTTP host:port (required, fixed)")
		join     = flag.String("join", "", "comma-separated gossip addresses to join")
		valkey   = flag.String("valkey", "", "Valkey/Redis host:port")
		fwd      = flag.Duration("forward-timeout", 50*time.Millisecond, "node.Config.ForwardTimeout")
		store    = flag.Duration("store-timeout", 50*time.Millisecond, "node.Config.StoreTimeout")
		verbose  = flag.Bool("v", false, "log the node's events to stderr")
		trace    = flag.Bool("trace", false, "with -v, log the node's hand-off steps too (Debug level)")
		offset   = flag.Duration("clock-offset", 0, "run the node's clock this far ahead of the system's (negative: behind)")
		lan      = flag.Bool("lan", false, "gossip with node.GossipLAN's timings (the default preset) instead of GossipFast's")
	)
	flag.Parse()
	if *name == "" || *gossip == "" || *rpc == "" || *httpAddr == "" {
		return errors.New("-name, -gossip, -rpc and -http are required")
	}
	secret, err := hex.DecodeString(os.Getenv(SecretEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", SecretEnv, err)
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		level := slog.LevelInfo
		if *trace {
			level = slog.LevelDebug
		}
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: microTime}))
	}

	nw := nodetest.NewNetwork()
	nw.Register(*name, *gossip)
	cfg := node.Config{
		Name:           *name,
		GossipAddr:     *gossip,
		RPCAddr:        *rpc,
		SecretKey:      secret,
		Gossip:         node.GossipFast,
		ForwardTimeout: *fwd,
		StoreTimeout:   *store,
		Network:        nw,
		Logger:         logger,
	}
	if *offset != 0 {
		cfg.Clock = offsetClock(*offset)
	}
	if *lan {
		cfg.Gossip = node.GossipLAN
	}
	if *join != "" {
		cfg.Join = strings.Split(*join, ",")
	}
	if *valkey != "" {
		cfg.ValkeyAddrs = []string{*valkey}
	}
	n, err := node.New(cfg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		n.Close()
		return err
	}
	srv := &http.Server{Handler: handler(n, nw, *name), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	select {
	case <-ctx.Done():
	case err := <-served:
		n.Close()
		return err
	}
	// Graceful: leave the cluster first (callers of this node get
	// ringlimit.ErrClosed meanwhile), then stop serving HTTP.
	cerr := n.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return cerr
}

// offsetClock is the system clock moved by a fixed offset: a container
// cannot set the kernel's clock, so a skewed host is simulated here.
type offsetClock time.Duration

func (o offsetClock) Now() time.Time { return time.Now().Add(time.Duration(o)) }

// Decision is the JSON answer of /v1/allow.
type Decision struct {
	Allowed      bool   `json:"allowed"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Source       string `json:"source"`
	Owner        string `json:"owner"` // the owner in this node's ring at the time of the call
	Error        string `json:"error,omitempty"`
}

// Stats is the JSON answer of /stats.
type Stats struct {
	Name       string     `json:"name"`
	Members    []string   `json:"members"`
	Goroutines int        `json:"goroutines"`
	FDs        int        `json:"fds"`
	Node       node.Stats `json:"node"`
}

func handler(n *node.Node, nw *nodetest.Network, self string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/allow", func(w http.ResponseWriter, r *http.Request) {
		d, status := allow(r.Context(), n, r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(d)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		s := Stats{
			Name:       self,
			Members:    n.Members(),
			Goroutines: runtime.NumGoroutine(),
			FDs:        openFDs(),
			Node:       n.Stats(),
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s)
	})
	mux.HandleFunc("POST /chaos/partition", func(w http.ResponseWriter, r *http.Request) {
		var names []string
		for _, nv := range strings.Split(r.URL.Query().Get("block"), ",") {
			name, gossip, ok := strings.Cut(nv, "@")
			if !ok || name == "" || gossip == "" {
				http.Error(w, "block: want name@gossip,...", http.StatusBadRequest)
				return
			}
			nw.Register(name, gossip)
			names = append(names, name)
		}
		nw.Partition([]string{self}, names)
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /chaos/peers", func(w http.ResponseWriter, r *http.Request) {
		// Gossip still flows: the ring keeps the nodes, forwards to them fail.
		for _, name := range strings.Split(r.URL.Query().Get("block"), ",") {
			if name == "" {
				http.Error(w, "block: want name,...", http.StatusBadRequest)
				return
			}
			nw.Drop(self, name)
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /chaos/heal", func(w http.ResponseWriter, r *http.Request) {
		nw.Heal()
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func allow(ctx context.Context, n *node.Node, r *http.Request) (Decision, int) {
	q := r.URL.Query()
	bad := func(err error) (Decision, int) { return Decision{Error: err.Error()}, http.StatusBadRequest }
	alg, err := ringlimit.ParseAlgorithm(q.Get("algorithm"))
	if err != nil {
		return bad(err)
	}
	limit, err := strconv.ParseInt(q.Get("limit"), 10, 64)
	if err != nil {
		return bad(fmt.Errorf("limit: %w", err))
	}
	window, err := time.ParseDuration(q.Get("window"))
	if err != nil {
		return bad(fmt.Errorf("window: %w", err))
	}
	hits := int64(1)
	if s := q.Get("n"); s != "" {
		if hits, err = strconv.ParseInt(s, 10, 64); err != nil {
			return bad(fmt.Errorf("n: %w", err))
		}
	}
	key := q.Get("key")
	rule := ringlimit.Rule{Algorithm: alg, Limit: limit, Window: window}
	d, err := n.AllowN(ctx, key, rule, hits)
	out := Decision{
		Allowed:      d.Allowed,
		Remaining:    d.Remaining,
		RetryAfterMS: d.RetryAfter.Milliseconds(),
		Source:       d.Source.String(),
		Owner:        n.Owner(key),
	}
	if err != nil {
		out.Source = ""
		out.Error = err.Error()
		return out, http.StatusInternalServerError
	}
	return out, http.StatusOK
}

// openFDs counts this process's open file descriptors; -1 if /proc is not
// there.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}
