// Command demo-cluster starts a real local ringlimit cluster that you can
// watch and break: a Valkey (or Redis, or an embedded stand-in), N node
// processes that join each other, traffic across them, and a live view.
//
//	go run ./cmd/demo-cluster             # 3 nodes until q or Ctrl-C
//	go run ./cmd/demo-cluster -chaos      # the scripted scenario, then a summary
//
// While it runs, type k N (kill -9 node N), r N (restart it), s (kill the
// store), S (start it again), c (the scripted chaos, over 30 s) or q (quit),
// then Enter.
//
// It also serves a web dashboard, at the address it prints at start
// (-dashboard fixes it): the ring, each node's decisions per second by
// source over the last minute, the breakers, the busiest key windows against
// their limit and the events, refreshed once a second from what the
// supervisor polled (the page never talks to the nodes), with buttons for
// the commands above. The buttons answer only loopback clients, even when
// -dashboard binds a wider address; every route, the page and its state
// too, answers only a request that names the dashboard by a loopback name
// or by the address it listens on, so a DNS-rebinding page cannot read it.
//
// The store is a valkey-server or redis-server found on PATH (on a free
// loopback port, no persistence), else an embedded one: miniredis, in this
// binary re-executed as "demo-cluster store", a process of its own so that
// the traffic generator cannot starve it. Each node is this binary
// re-executed as "demo-cluster node": a ringlimit node with an HTTP server on
// 127.0.0.1 that serves
//
//	GET  /api/items, POST /api/posts, /api/search   the demo API, behind httplimit
//	                                                with the rules of rules.yaml
//	POST /login?user=U&ok=true|false                failed logins limited per user: check,
//	                                                record a failure, clear on success
//	GET  /v1/allow?key=K&algorithm=A&limit=L&window=W&n=N&burst=B
//	                                                one decision, as JSON
//	GET  /healthz
//	GET  /debug/ringlimit?key=K                     members, K's owner, counters
//
// The view is redrawn every second on a terminal (one line a second
// otherwise). At the end (q, Ctrl-C or -duration) every process is stopped and
// a summary per phase is printed, the last line of it as JSON.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "node" { // hidden: one node process
		if err := runNode(os.Args[2:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "demo-cluster node:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "store" { // hidden: the embedded store's process
		if err := runStore(os.Args[2:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "demo-cluster store:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.IntVar(&o.nodes, "nodes", 3, "number of node processes")
	flag.IntVar(&o.rate, "rate", 300, "requests per second the traffic generator sends, over all nodes (0: none)")
	flag.IntVar(&o.keys, "keys", 100, "number of distinct keys (API keys and users) in the traffic")
	flag.IntVar(&o.hot, "hot", 3, "number of hot keys, which get 60% of the traffic")
	flag.BoolVar(&o.chaos, "chaos", false, "run the scripted scenario: kill a node, restart it, kill the store, restart it")
	flag.DurationVar(&o.duration, "duration", 0, "end the run after this long and print a summary (0: until q or Ctrl-C; 60s with -chaos)")
	flag.StringVar(&o.store, "store", "auto", "auto: valkey-server or redis-server from PATH, else embedded; embedded: always the embedded one (miniredis, in a process of its own)")
	flag.StringVar(&o.rules, "rules", "", "rule file for the demo API (default: the shipped rules.yaml)")
	flag.BoolVar(&o.plain, "plain", false, "print one line a second even on a terminal")
	flag.StringVar(&o.dashboard, "dashboard", "127.0.0.1:0", "listen address of the web dashboard (its controls answer only loopback clients)")
	flag.Parse()
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "demo-cluster:", err)
		os.Exit(2)
	}
	if o.chaos && o.duration == 0 {
		o.duration = 60 * time.Second
	}
	if !o.plain {
		if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			o.tty = true
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdin, os.Stdout); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "demo-cluster:", err)
		os.Exit(1)
	}
}
