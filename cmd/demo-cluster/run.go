package main

import (
	"bufio"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed rules.yaml
var shippedRules []byte

// options are the command line's.
type options struct {
	nodes, rate, keys, hot int
	chaos, plain, tty      bool
	duration               time.Duration
	store, rules           string
	dashboard              string // the web dashboard's listen address
}

func (o options) check() error {
	switch {
	case o.nodes < 1 || o.nodes > 9:
		return errors.New("-nodes: want 1 to 9")
	case o.rate < 0 || o.rate > 5000:
		return errors.New("-rate: want 0 to 5000 requests a second")
	case o.keys < 1 || o.keys > 1_000_000:
		return errors.New("-keys: want 1 to 1000000")
	case o.hot < 0 || o.hot > o.keys:
		return errors.New("-hot: want 0 to -keys")
	case o.duration < 0:
		return errors.New("-duration: negative")
	case o.store != "auto" && o.store != "embedded":
		return errors.New("-store: want auto or embedded")
	case o.dashboard == "":
		return errors.New("-dashboard: want an address like 127.0.0.1:8080")
	}
	return nil
}

// run starts the store, the nodes, the traffic and the view, obeys commands
// and the chaos script until q, ctx or -duration ends it, stops everything,
// and prints the summary: in words, then as one JSON line.
func run(ctx context.Context, o options, stdin io.Reader, stdout io.Writer) (err error) {
	start := time.Now()
	dir, err := os.MkdirTemp("", "demo-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rulesPath := o.rules
	if rulesPath == "" {
		rulesPath = filepath.Join(dir, "rules.yaml")
		if err := os.WriteFile(rulesPath, shippedRules, 0o600); err != nil {
			return err
		}
	}

	bin, err := os.Executable() // re-executed for the nodes and the embedded store
	if err != nil {
		return err
	}
	st, err := newStore(o.store, bin, dir)
	if err != nil {
		return err
	}
	if err := st.Start(); err != nil {
		return err
	}
	defer st.Stop()
	fmt.Fprintf(stdout, "store: %s at %s\n", st.Kind(), st.Addr())
	fmt.Fprintf(stdout, "rules: %s (reloaded every second); node logs: %s\n", rulesPath, dir)

	dash := newDashboard(o.nodes)
	ln, err := net.Listen("tcp", o.dashboard)
	if err != nil {
		return fmt.Errorf("-dashboard: %w", err)
	}
	srv := &http.Server{Handler: dash.handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	var srvWG sync.WaitGroup
	srvWG.Add(1)
	go func() { defer srvWG.Done(); srv.Serve(newLimitListener(ln, dashMaxConns)) }()
	defer func() { dash.stop(); srv.Close(); srvWG.Wait() }()
	fmt.Fprintf(stdout, "dashboard: %s (controls for loopback clients only)\n", dashURL(ln.Addr()))

	secret := make([]byte, 32)
	rand.Read(secret)
	events := newEventLog(start)
	sup, err := newSupervisor(bin, dir, rulesPath, st.Addr(), hex.EncodeToString(secret), o.nodes, events)
	if err != nil {
		return err
	}
	defer sup.stopAll(3 * time.Second)
	if err := sup.startAll(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d nodes up\n", o.nodes)

	var targets []target
	for _, p := range sup.nodes {
		targets = append(targets, target{name: p.name, addr: p.httpAddr, up: p.serving.Load})
	}
	gen := newTraffic(o.rate, o.keys, o.hot, targets)
	c := &control{sup: sup, st: st, gen: gen, events: events, start: time.Now()}
	c.begin("whole", true)
	genCtx, stopGen := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); gen.run(genCtx) }()
	defer func() { stopGen(); wg.Wait() }()

	cmds := readCommands(stdin)
	var script []timedStep
	if o.chaos {
		script = schedule(chaosScript(o.nodes), c.start, o.duration)
	}
	v := newView(sup, st, gen, events, c.start, o.tty, o.rate)
	publish := func() {
		b, err := v.state(len(script) > 0)
		if err != nil {
			events.add("%s", err.Error())
			return
		}
		dash.publish(b)
	}
	// command carries out a line from stdin or the dashboard: c starts the
	// scripted chaos, the rest is control's.
	command := func(line string) error {
		if strings.TrimSpace(line) != "c" {
			return c.do(ctx, line)
		}
		if len(script) > 0 {
			events.add("the scripted chaos is already running")
			return nil
		}
		script = schedule(chaosScript(o.nodes), time.Now(), chaosSpan)
		events.add("scripted chaos: %s", describe(script, time.Now()))
		return nil
	}
	v.poll(ctx)
	v.sample()
	publish()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var end <-chan time.Time
	if o.duration > 0 {
		end = time.After(o.duration)
	}
loop:
	for {
		var next <-chan time.Time
		if len(script) > 0 {
			next = time.After(time.Until(script[0].at))
		}
		select {
		case <-ctx.Done():
			break loop
		case <-end:
			break loop
		case <-tick.C:
			v.poll(ctx)
			v.sample()
			publish()
			v.draw(stdout)
		case <-next:
			s := script[0]
			script = script[1:]
			c.do(ctx, s.action)
			publish()
		case line, ok := <-cmds:
			if !ok {
				cmds = nil // stdin closed: keep running
				continue
			}
			if command(line) == errQuit {
				break loop
			}
			publish()
		case cmd := <-dash.cmds:
			events.add("dashboard: %s (from %s)", cmd.desc, cmd.from)
			command(cmd.line)
			publish()
			close(cmd.done)
		}
	}
	dash.stop()

	stopGen()
	wg.Wait()
	c.finish()
	up := 0
	for _, u := range sup.up() {
		if u {
			up++
		}
	}
	sum := summary{Store: st.Kind(), Nodes: o.nodes, NodesUp: up, DurationS: round1(time.Since(c.start)),
		Requests: gen.total.Requests.Load(), Errors: gen.total.Errors.Load(),
		AllWindows: checkAll(gen.windowCounts(), gen.windowSources, c.start), Phases: summarize(c.phases, gen.windowCounts(), c.start)}
	sup.stopAll(3 * time.Second)
	st.Stop()
	printSummary(stdout, sum)
	return ctx.Err()
}

// control carries out commands, and starts a new phase at each.
type control struct {
	sup    *supervisor
	st     store
	gen    *traffic
	events *eventLog
	start  time.Time
	phases []*phase
}

func (c *control) begin(name string, whole bool) {
	now := time.Now()
	if n := len(c.phases); n > 0 {
		c.phases[n-1].end = now
	}
	p := &phase{Name: name, Whole: whole, start: now}
	c.phases = append(c.phases, p)
	c.gen.phase.Store(p)
}

func (c *control) finish() {
	if n := len(c.phases); n > 0 {
		c.phases[n-1].end = time.Now()
	}
	c.gen.phase.Store(nil)
}

func (c *control) whole() bool {
	for _, u := range c.sup.up() {
		if !u {
			return false
		}
	}
	return c.st.Running()
}

// do carries out one command: k N, r N, s, S or q.
func (c *control) do(ctx context.Context, line string) error {
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil
	}
	node := func() (int, bool) {
		if len(f) != 2 {
			return 0, false
		}
		i, err := strconv.Atoi(f[1])
		return i - 1, err == nil && i >= 1 && i <= len(c.sup.nodes)
	}
	switch f[0] {
	case "q":
		return errQuit
	case "k":
		i, ok := node()
		if !ok {
			break
		}
		c.sup.kill(i)
		c.begin(fmt.Sprintf("node %d killed", i+1), c.whole())
		return nil
	case "r":
		i, ok := node()
		if !ok {
			break
		}
		if err := c.sup.start(ctx, i); err != nil {
			c.events.add("restart of node %d failed: %v", i+1, err)
		}
		c.begin(fmt.Sprintf("node %d back", i+1), c.whole())
		return nil
	case "s":
		c.st.Stop()
		c.events.add("store killed")
		c.begin("store killed", c.whole())
		return nil
	case "S":
		if err := c.st.Start(); err != nil {
			c.events.add("store start failed: %v", err)
		} else {
			c.events.add("store started, empty")
		}
		c.begin("store back", c.whole())
		return nil
	}
	c.events.add("unknown command %q (k N, r N, s, S, c, q)", line)
	return nil
}

// readCommands delivers stdin's lines until it ends. Its goroutine blocks in
// Read, which nothing can interrupt; it ends with the process.
func readCommands(r io.Reader) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

func printSummary(w io.Writer, s summary) {
	fmt.Fprintf(w, "\nsummary: %d nodes (%d up at the end), store %s, %.1fs, %d requests, %d errors\n",
		s.Nodes, s.NodesUp, s.Store, s.DurationS, s.Requests, s.Errors)
	fmt.Fprintf(w, "%-16s %5s %11s %8s %8s %8s %6s %7s  %-40s %s\n", "phase", "whole", "time", "requests", "allowed", "denied", "errors", "killed", "sources (local/peer/store/fallback)", "admitted per key-window vs limit")
	for _, p := range s.Phases {
		fmt.Fprintf(w, "%-16s %5t %5.1f-%5.1f %8d %8d %8d %6d %7d  %-40s max %d of %d in %d windows, %d over\n",
			p.Name, p.Whole, p.StartS, p.EndS, p.Requests, p.Allowed, p.Denied, p.Errors, p.ToKilled,
			fmt.Sprintf("%d/%d/%d/%d", p.Sources["local"], p.Sources["peer"], p.Sources["store"], p.Sources["fallback"]),
			p.Check.MaxAdmitted, p.Check.Limit, p.Check.Windows, p.Check.OverLimit)
		if p.LastErr != "" {
			fmt.Fprintf(w, "  last error: %s\n", p.LastErr)
		}
	}
	fmt.Fprintf(w, "all key-windows of /v1/allow, failures included: max %d admitted of %d, %d of %d windows over the limit\n",
		s.AllWindows.MaxAdmitted, s.AllWindows.Limit, s.AllWindows.OverLimit, s.AllWindows.Windows)
	for _, o := range s.AllWindows.Over {
		fmt.Fprintf(w, "  %s: %d admitted in the window from %.1fs\n", o.Key, o.Admitted, o.AtS)
	}
	line, _ := json.Marshal(map[string]summary{"summary": s})
	fmt.Fprintf(w, "%s\n", line)
}
