package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit"
)

func sourceName(i int) string { return ringlimit.Source(i).String() }

// view polls every node's /debug/ringlimit once a second and draws the
// cluster: a full-screen frame on a terminal, one compact line otherwise.
type view struct {
	sup     *supervisor
	st      store
	gen     *traffic
	events  *eventLog
	client  *http.Client
	start   time.Time
	nodes   []nodeView
	prevGen []snapshot
	prevTot snapshot
	tty     bool
	rate    int
	seen    int // events already printed (plain lines)
	watch   dashWatch
}

type nodeView struct {
	up       bool
	dbg, old debugJSON
	haveOld  bool
}

// snapshot is a counters' value at one instant, for rates.
type snapshot struct{ requests, allowed, denied, errors, toKilled uint64 }

func snap(c *counters) snapshot {
	return snapshot{c.Requests.Load(), c.Allowed.Load(), c.Denied.Load(), c.Errors.Load(), c.ToKilled.Load()}
}

func newView(sup *supervisor, st store, gen *traffic, events *eventLog, start time.Time, tty bool, rate int) *view {
	return &view{sup: sup, st: st, gen: gen, events: events, start: start, tty: tty, rate: rate,
		client:  &http.Client{Timeout: 500 * time.Millisecond},
		nodes:   make([]nodeView, len(sup.nodes)),
		prevGen: make([]snapshot, len(sup.nodes))}
}

// poll fetches every serving node's debug JSON, concurrently.
func (v *view) poll(ctx context.Context) {
	var wg sync.WaitGroup
	for i, p := range v.sup.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := &v.nodes[i]
			var d debugJSON
			if !p.serving.Load() || v.get(ctx, "http://"+p.httpAddr+"/debug/ringlimit?key=hot-0", &d) != nil {
				n.up = false
				return
			}
			n.old, n.haveOld = n.dbg, n.up
			n.dbg, n.up = d, true
		}()
	}
	wg.Wait()
}

func (v *view) get(ctx context.Context, url string, dst any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := v.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(dst)
}

// delta is now − before, or now if the counter restarted (a new process).
func delta(now, before uint64) uint64 {
	if now < before {
		return now
	}
	return now - before
}

// draw writes one frame (or line) and remembers the counters for the next.
func (v *view) draw(w io.Writer) {
	var b strings.Builder
	if v.tty {
		v.frame(&b)
	} else {
		v.line(&b)
	}
	io.WriteString(w, b.String())
	for i, c := range v.gen.perNode {
		v.prevGen[i] = snap(c)
	}
	v.prevTot = snap(&v.gen.total)
}

func (v *view) storeState() string {
	if v.st.Running() {
		return "up"
	}
	return "DOWN"
}

func (v *view) frame(b *strings.Builder) {
	b.WriteString("\x1b[H\x1b[2J")
	el := time.Since(v.start).Truncate(time.Second)
	fmt.Fprintf(b, "ringlimit demo-cluster   %s   up %s\n", time.Now().Format("15:04:05"), el)
	fmt.Fprintf(b, "store: %s at %s  [%s]\n", v.st.Kind(), v.st.Addr(), v.storeState())
	tot := snap(&v.gen.total)
	fmt.Fprintf(b, "traffic: %d req/s target, %d keys, %d hot | last second: %d sent, %d allowed, %d denied, %d errors | errors so far: %d (+%d to killed nodes)\n\n",
		v.rate, v.gen.keys, v.gen.hot, tot.requests-v.prevTot.requests, tot.allowed-v.prevTot.allowed,
		tot.denied-v.prevTot.denied, tot.errors-v.prevTot.errors, tot.errors, tot.toKilled)

	fmt.Fprintf(b, "%-4s %-5s %-16s %-7s %6s %8s %7s %8s %10s %6s %9s %8s %7s  %s\n",
		"node", "state", "http", "members", "keys", "local/s", "peer/s", "store/s", "fallback/s", "fwd/s", "allowed/s", "denied/s", "errors", "store breaker")
	for i, p := range v.sup.nodes {
		n := v.nodes[i]
		g, pg := snap(v.gen.perNode[i]), v.prevGen[i]
		if !n.up {
			fmt.Fprintf(b, "%-4s \x1b[31m%-5s\x1b[0m %-16s %-7s %6s %8s %7s %8s %10s %6s %9d %8d %7d\n",
				p.name, "DOWN", p.httpAddr, "-", "-", "-", "-", "-", "-", "-",
				g.allowed-pg.allowed, g.denied-pg.denied, g.errors)
			continue
		}
		var rates [4]uint64
		var fwd uint64
		if n.haveOld {
			for s := range rates {
				rates[s] = delta(n.dbg.Stats.Decisions[s], n.old.Stats.Decisions[s])
			}
			fwd = delta(n.dbg.Stats.Forwards, n.old.Stats.Forwards)
		}
		fmt.Fprintf(b, "%-4s \x1b[32m%-5s\x1b[0m %-16s %-7d %6d %8d %7d %8d %10d %6d %9d %8d %7d  %s\n",
			p.name, "up", p.httpAddr, len(n.dbg.Members), n.dbg.Stats.Keys, rates[0], rates[1], rates[2], rates[3], fwd,
			g.allowed-pg.allowed, g.denied-pg.denied, g.errors, n.dbg.Stats.StoreBreaker)
	}

	fmt.Fprintf(b, "\n%-9s %-15s %-32s %10s\n", "rule", "algorithm", "limit", "admitted/s")
	for _, r := range v.ruleRates() {
		fmt.Fprintf(b, "%-9s %-15s %-32s %10d\n", r.Name, r.Algorithm, fmt.Sprintf("%d per %s per %s", r.Limit, r.Window, r.Key), r.Admitted)
	}
	windows := v.gen.windowCounts()
	worst, over, cur := 0, 0, time.Now().UnixMilli()/checkWindow.Milliseconds()
	for k, n := range windows {
		if k.window == cur-1 {
			worst = max(worst, n)
		}
		if n > checkLimit {
			over++
		}
	}
	fmt.Fprintf(b, "%-9s %-15s %-32s %10s  busiest key last window: %d admitted; windows over the limit so far: %d\n",
		"/v1/allow", "fixed_window", fmt.Sprintf("%d per %s per key", checkLimit, checkWindow), "", worst, over)
	for i, n := range v.nodes {
		if n.up && n.dbg.Owner != "" {
			fmt.Fprintf(b, "owner of hot-0 (as %s sees it): %s\n", v.sup.nodes[i].name, n.dbg.Owner)
			break
		}
	}

	b.WriteString("\nevents:\n")
	for _, e := range v.events.last(6) {
		b.WriteString("  " + e + "\n")
	}
	b.WriteString("\ncommands: k N kill -9 node N | r N restart node N | s stop the store | S start the store | c scripted chaos | q quit\n> ")
}

// ruleRates sums each rule's admitted requests over the nodes, per second.
func (v *view) ruleRates() []ruleJSON {
	var out []ruleJSON
	idx := map[string]int{}
	for _, n := range v.nodes {
		if !n.up {
			continue
		}
		old := map[string]uint64{}
		for _, r := range n.old.Rules {
			old[r.Name] = r.Admitted
		}
		for _, r := range n.dbg.Rules {
			d := uint64(0)
			if n.haveOld {
				d = delta(r.Admitted, old[r.Name])
			}
			if i, ok := idx[r.Name]; ok {
				out[i].Admitted += d
				continue
			}
			idx[r.Name] = len(out)
			r.Admitted = d
			out = append(out, r)
		}
	}
	return out
}

// line is the compact form, for a stdout that is not a terminal.
func (v *view) line(b *strings.Builder) {
	var news []string
	news, v.seen = v.events.since(v.seen)
	for _, e := range news {
		fmt.Fprintf(b, "event %s\n", strings.TrimSpace(e))
	}
	tot := snap(&v.gen.total)
	fmt.Fprintf(b, "t=%ds store=%s nodes=", int(time.Since(v.start).Seconds()), v.storeState())
	var src [4]uint64
	for i, p := range v.sup.nodes {
		n := v.nodes[i]
		state := "down"
		if n.up {
			state = fmt.Sprintf("up(%d members,%d keys)", len(n.dbg.Members), n.dbg.Stats.Keys)
			if n.haveOld {
				for s := range src {
					src[s] += delta(n.dbg.Stats.Decisions[s], n.old.Stats.Decisions[s])
				}
			}
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(b, "%s:%s", p.name, state)
	}
	fmt.Fprintf(b, " req/s=%d allowed/s=%d denied/s=%d errors_total=%d decisions/s local=%d peer=%d store=%d fallback=%d",
		tot.requests-v.prevTot.requests, tot.allowed-v.prevTot.allowed, tot.denied-v.prevTot.denied, tot.errors,
		src[0], src[1], src[2], src[3])
	for _, r := range v.ruleRates() {
		fmt.Fprintf(b, " %s=%d admitted/s(limit %d per %s)", r.Name, r.Admitted, r.Limit, r.Window)
	}
	b.WriteByte('\n')
}
