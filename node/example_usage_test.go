package node_test

// The README's Go snippets about a node, as Examples so that go vet and go
// test compile them (the root package's TestReadmeGoSnippetsAreExamples
// checks that each README block is here, line for line). The ones without
// an Output comment need a cluster, a store or a signal, and are compiled
// only.

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
)

// A node in a service instance: it joins the cluster through any live
// member and decides keys wherever their owner is.
func ExampleNew() {
	ctx := context.Background()
	key := []byte(os.Getenv("RINGLIMIT_SECRET")) // the same secret on every node

	n, err := node.New(node.Config{
		Name:        "api-1", // unique in the cluster
		GossipAddr:  "0.0.0.0:7946",
		RPCAddr:     "0.0.0.0:7947",
		Join:        []string{"10.0.0.5:7946"}, // any live member(s)
		ValkeyAddrs: []string{"10.0.0.9:6379"}, // optional central store
		SecretKey:   key,                       // 16/24/32 bytes: gossip encryption + peer auth
	})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 100, Window: time.Minute}
	d, err := n.Allow(ctx, "user:42", rule) // err only for bad input, a closed node, a cancelled ctx
	if err != nil {
		log.Fatal(err)
	}
	if !d.Allowed {
		// d.RetryAfter, d.Remaining, d.ResetAfter; d.Source says who decided
		fmt.Println("retry in", d.RetryAfter)
	}
}

// Limits at several scales, applied all or nothing.
func ExampleNode_AllowAll() {
	ctx := context.Background()
	n, err := node.New(node.Config{Name: "api-1", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0"})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	rules := []ringlimit.Rule{
		{Algorithm: ringlimit.SlidingWindow, Limit: 10, Window: time.Second},
		{Algorithm: ringlimit.FixedWindow, Limit: 1000, Window: 24 * time.Hour},
	}
	ds, err := n.AllowAll(ctx, "user:42", rules, 1) // one Decision per rule, in order
	if err != nil {
		log.Fatal(err)
	}
	d := ringlimit.Binding(ds) // the one to report: the longest denial, or the least left

	fmt.Println(d.Allowed, d.Remaining, ds[1].Remaining)
	// Output: true 9 999
}

// A node on Valkey Cluster: one master as a seed is enough.
func ExampleConfig_cluster() {
	n, err := node.New(node.Config{
		// ...
		ValkeyAddrs: []string{"valkey-0.valkey:6379"}, // any master(s); the client finds the rest
	})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
}

// Readiness and a graceful stop: report not ready, let the load balancers
// notice, finish the requests in flight, then hand the keys off.
func ExampleNode_Ready() {
	n, err := node.New(node.Config{Name: "api-1"})
	if err != nil {
		log.Fatal(err)
	}
	var draining atomic.Bool
	const drain = 5 * time.Second
	mux := http.NewServeMux()
	srv := &http.Server{Addr: ":8080", Handler: mux}
	go srv.ListenAndServe()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if draining.Load() || !n.Ready() { // draining, or not joined yet
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	<-ctx.Done()              // SIGTERM, after the preStop hook
	draining.Store(true)      // /readyz answers 503; requests are still served
	time.Sleep(drain)         // the load balancers stop sending new requests
	srv.Shutdown(shutdownCtx) // finish the requests in flight
	n.Close()                 // hand every key's state to its next owner, leave the cluster
}
