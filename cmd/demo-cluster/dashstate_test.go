package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

type fakeStore struct{ up bool }

func (fakeStore) Kind() string    { return "fake" }
func (fakeStore) Addr() string    { return "127.0.0.1:1" }
func (s fakeStore) Running() bool { return s.up }
func (fakeStore) Start() error    { return nil }
func (fakeStore) Stop() error     { return nil }

// fakeView is a view of three nodes whose processes run (as far as the
// supervisor knows) and whose polls the test writes itself.
func fakeView() *view {
	sup := &supervisor{}
	var targets []target
	for _, name := range []string{"n1", "n2", "n3"} {
		p := &nodeProc{name: name, httpAddr: "127.0.0.1:1", cmd: &exec.Cmd{}, exited: make(chan struct{})}
		sup.nodes = append(sup.nodes, p)
		targets = append(targets, target{name: name, addr: p.httpAddr, up: func() bool { return true }})
	}
	start := time.Now()
	return newView(sup, fakeStore{up: true}, newTraffic(0, 10, 1, targets), newEventLog(start), start, false, 0)
}

// poll stands in for view.poll: node i answered with members, the store
// breaker's state and the peers' (nil: node i is down).
func (v *view) fakePoll(i int, members []string, store string, peers map[string]string) {
	n := &v.nodes[i]
	if members == nil {
		n.up = false
		return
	}
	n.old, n.haveOld = n.dbg, n.up
	n.dbg.Members = members
	n.dbg.Stats.StoreBreaker, n.dbg.Stats.PeerBreakers = store, peers
	n.up = true
}

// news returns the events added since the last call, without their times.
func news(v *view, seen *int) []string {
	var evs []string
	evs, *seen = v.events.since(*seen)
	for i, e := range evs {
		evs[i] = strings.TrimSpace(e[strings.Index(e, "s  ")+3:])
	}
	return evs
}

func TestWatchRing(t *testing.T) {
	v, seen := fakeView(), 0
	all, two := []string{"n1", "n2", "n3"}, []string{"n1", "n3"}
	steps := []struct {
		seenBy  []string // what each node sees; nil: down
		events  []string
		members []string
	}{
		{all, []string{"n1 joined the ring (as n1 sees it)", "n2 joined the ring (as n1 sees it)", "n3 joined the ring (as n1 sees it)"}, all},
		{all, nil, all},
		{two, []string{"n2 left the ring (as n1 sees it)"}, two},
		{all, []string{"n2 rejoined the ring (as n1 sees it)"}, all},
	}
	for i, s := range steps {
		for n := range 3 {
			v.fakePoll(n, s.seenBy, "closed", nil)
		}
		v.sample()
		if got := news(v, &seen); !slices.Equal(got, s.events) {
			t.Errorf("step %d: events %q, want %q", i, got, s.events)
		}
		if !slices.Equal(v.watch.ring.Members, s.members) || v.watch.ring.SeenBy != "n1" {
			t.Errorf("step %d: ring %v seen by %s, want %v by n1", i, v.watch.ring.Members, v.watch.ring.SeenBy, s.members)
		}
	}
	// n1 down: the ring is n2's view.
	v.fakePoll(0, nil, "", nil)
	v.fakePoll(1, two[1:], "closed", nil)
	v.sample()
	if v.watch.ring.SeenBy != "n2" || !slices.Equal(v.watch.ring.Members, []string{"n3"}) {
		t.Errorf("with n1 down: ring %v seen by %s", v.watch.ring.Members, v.watch.ring.SeenBy)
	}
	// Nobody up: the last ring stays, and nobody is said to have left.
	for n := range 3 {
		v.fakePoll(n, nil, "", nil)
	}
	v.sample()
	if got := news(v, &seen); len(got) != 2 || v.watch.ring.SeenBy != "n2" {
		t.Errorf("events %q, ring seen by %s", got, v.watch.ring.SeenBy)
	}
}

func TestWatchBreakers(t *testing.T) {
	v, seen := fakeView(), 0
	members := []string{"n1", "n2", "n3"}
	steps := []struct {
		store  string
		peers  map[string]string
		events []string
	}{
		{"closed", map[string]string{"n2": "closed", "n3": "closed"}, nil},
		{"open", map[string]string{"n2": "open", "n3": "closed"}, []string{"n1: breaker for peer n2 opened", "n1: store breaker opened"}},
		{"half-open", map[string]string{"n2": "open", "n3": "closed"}, nil},
		{"closed", map[string]string{"n3": "closed"}, []string{"n1: store breaker closed again"}},
		{"open", map[string]string{"n2": "closed", "n3": "closed"}, []string{"n1: store breaker opened"}},
	}
	for i, s := range steps {
		v.fakePoll(0, members, s.store, s.peers)
		v.sample()
		got := news(v, &seen)
		got = slices.DeleteFunc(got, func(e string) bool { return strings.Contains(e, "ring") })
		if !slices.Equal(got, s.events) {
			t.Errorf("step %d: events %q, want %q", i, got, s.events)
		}
	}
	// A restarted node starts with its breakers closed: no news.
	v.fakePoll(0, nil, "", nil)
	v.sample()
	v.fakePoll(0, members, "closed", map[string]string{"n2": "closed"})
	v.sample()
	if got := news(v, &seen); len(slices.DeleteFunc(got, func(e string) bool { return strings.Contains(e, "ring") })) != 0 {
		t.Errorf("after a restart: %q", got)
	}
}

func TestHistory(t *testing.T) {
	v := fakeView()
	for s := range historyLen + 10 {
		v.fakePoll(0, []string{"n1"}, "closed", nil)
		v.nodes[0].dbg.Stats.Decisions = sourceCounts{uint64(s) * 10, uint64(s), 0, 0}
		v.fakePoll(2, nil, "", nil)
		v.sample()
	}
	h := v.watch.hist[0]
	if len(h) != historyLen {
		t.Fatalf("%d seconds of history, want %d", len(h), historyLen)
	}
	if h[len(h)-1] != [4]uint64{10, 1, 0, 0} {
		t.Errorf("last second %v, want the counters' deltas [10 1 0 0]", h[len(h)-1])
	}
	if h2 := v.watch.hist[2]; len(h2) != historyLen || h2[len(h2)-1] != [4]uint64{} {
		t.Errorf("a down node's history ends %v, want zeros", h2[len(h2)-1])
	}
}

func TestState(t *testing.T) {
	v := fakeView()
	members := []string{"n1", "n2", "n3"}
	for n := range 3 {
		v.fakePoll(n, members, "closed", nil)
	}
	v.sup.nodes[1].cmd = nil // n2's process died since the poll
	v.sample()
	last := time.Now().UnixMilli()/checkWindow.Milliseconds() - 1
	v.gen.checks = map[checkWindowKey]int{
		{"hot-0", last}: checkLimit + 1, {"key-1", last}: 2, {"hot-1", last}: checkLimit,
		{"hot-0", last - 5}: checkLimit + 2, {"key-2", last - 1}: 1,
	}
	b, err := v.state(true)
	if err != nil {
		t.Fatal(err)
	}
	var s dashState
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if !s.Chaos || len(s.Nodes) != 3 || !s.Nodes[0].Up || s.Nodes[1].Up || !s.Nodes[2].Up {
		t.Errorf("chaos %t, nodes %+v: want n2 down at once", s.Chaos, s.Nodes)
	}
	if !slices.Equal(s.Ring.Members, members) || len(s.Ring.Arcs) < 3 {
		t.Fatalf("ring %v with %d arcs", s.Ring.Members, len(s.Ring.Arcs))
	}
	total := 0.0
	for _, a := range s.Ring.Arcs {
		if a.Owner < 0 || a.Owner >= 3 {
			t.Fatalf("arc %+v: owner out of range", a)
		}
		l := a.To - a.From
		if l <= 0 {
			l++
		}
		total += l
	}
	if total < 0.999 || total > 1.001 {
		t.Errorf("arcs cover %.4f of the ring, want 1", total)
	}
	want := []keyCount{{"hot-0", checkRule, checkLimit + 1}, {"hot-1", checkRule, checkLimit}, {"key-1", checkRule, 2}}
	if !slices.Equal(s.Windows.Busiest, want) || s.Windows.Over != 2 || s.Windows.Limit != checkLimit {
		t.Errorf("windows %+v, want busiest %v and 2 over", s.Windows, want)
	}
	if len(b) > 64<<10 {
		t.Errorf("state is %d bytes", len(b))
	}
}

// The header's totals come from one window: req/s is what was answered in
// it, allowed + denied + failed, even when more requests were sent than
// answered in it (a backlog, or a slow node), or fewer.
func TestTrafficTotalsAddUp(t *testing.T) {
	v := fakeView()
	for n := range 3 {
		v.fakePoll(n, []string{"n1", "n2", "n3"}, "closed", nil)
	}
	tot := &v.gen.total
	tot.Requests.Add(100)
	tot.Allowed.Add(60)
	tot.Denied.Add(30)
	v.sample() // the first window: everything so far
	v.draw(io.Discard)
	for i, c := range []struct{ sent, allowed, denied, errors, toKilled uint64 }{
		{250, 205, 75, 0, 0}, // the figures: more answered than sent in the window
		{100, 40, 10, 3, 2},  // fewer
	} {
		tot.Requests.Add(c.sent)
		tot.Allowed.Add(c.allowed)
		tot.Denied.Add(c.denied)
		tot.Errors.Add(c.errors)
		tot.ToKilled.Add(c.toKilled)
		v.sample()
		b, err := v.state(false)
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Traffic map[string]uint64 `json:"traffic"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		tr := s.Traffic
		want := map[string]uint64{"req_s": c.allowed + c.denied + c.errors + c.toKilled,
			"allowed_s": c.allowed, "denied_s": c.denied, "failed_s": c.errors + c.toKilled}
		for k, w := range want {
			if tr[k] != w {
				t.Errorf("window %d: %s %d, want %d (traffic %v)", i, k, tr[k], w, tr)
			}
		}
		v.draw(io.Discard) // the terminal's view takes its own snapshot: no matter
	}
}

// The dashboard's ring is readable: each member's share of the hash space
// as a few arcs, not its hundreds of virtual-node arcs. Each eighth of the
// ring shows each member's exact share of that eighth as one arc (members
// in alternating order, so that neighbours across a boundary merge), and
// share holds each member's exact share of the whole ring.
func TestRingFewArcs(t *testing.T) {
	const sectors = 8
	for _, members := range [][]string{{"n1"}, {"n1", "n3"}, {"n1", "n2", "n3"}, {"a", "b", "c", "d", "e", "f", "g", "h", "i"}} {
		v := fakeView()
		v.fakePoll(0, members, "closed", nil)
		v.sample()
		b, err := v.state(false)
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Ring struct {
				Members []string
				Share   []float64
				Arcs    []struct {
					F, T float64
					O    int
				}
			}
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		m := len(members)
		if max := m*sectors - sectors + 1; len(s.Ring.Arcs) > max || (m == 1 && len(s.Ring.Arcs) != 1) {
			t.Errorf("%d members: %d arcs, want at most %d", m, len(s.Ring.Arcs), max)
		}
		// The exact shares, whole and per sector, from the ring itself.
		exact := make([]float64, m)
		perSector := make([][]float64, sectors)
		for i := range perSector {
			perSector[i] = make([]float64, m)
		}
		add := func(into [][]float64, total []float64, f, to float64, o int) {
			for f < to {
				sec := min(int(f*sectors), sectors-1)
				end := min(to, float64(sec+1)/sectors)
				into[sec][o] += end - f
				total[o] += end - f
				f = end
			}
		}
		for _, a := range ring.New(members, 0).Arcs() {
			f, to := float64(a.From)/(1<<64), float64(a.To)/(1<<64)
			o := slices.Index(members, a.Owner)
			if to <= f {
				add(perSector, exact, f, 1, o)
				add(perSector, exact, 0, to, o)
			} else {
				add(perSector, exact, f, to, o)
			}
		}
		drawn := make([][]float64, sectors)
		for i := range drawn {
			drawn[i] = make([]float64, m)
		}
		drawnTotal := make([]float64, m)
		for _, a := range s.Ring.Arcs {
			if a.O < 0 || a.O >= m {
				t.Fatalf("arc %+v: owner out of range", a)
			}
			if a.T <= a.F {
				add(drawn, drawnTotal, a.F, 1, a.O)
				add(drawn, drawnTotal, 0, a.T, a.O)
			} else {
				add(drawn, drawnTotal, a.F, a.T, a.O)
			}
		}
		const tol = 2e-4 // the fractions are rounded for the JSON
		if len(s.Ring.Share) != m {
			t.Fatalf("%d members: share %v", m, s.Ring.Share)
		}
		for o := range m {
			if math.Abs(drawnTotal[o]-exact[o]) > tol || math.Abs(s.Ring.Share[o]-exact[o]) > tol {
				t.Errorf("%d members: %s drawn %.5f, share %.5f, exact %.5f", m, members[o], drawnTotal[o], s.Ring.Share[o], exact[o])
			}
			for sec := range sectors {
				if math.Abs(drawn[sec][o]-perSector[sec][o]) > tol {
					t.Errorf("%d members: %s in sector %d drawn %.5f, exact %.5f", m, members[o], sec, drawn[sec][o], perSector[sec][o])
				}
			}
		}
	}
}

// The busiest keys name their rule, and the state carries the per-rule
// table the terminal view prints: each rule once, its admitted hits per
// second summed over the nodes that are up.
func TestStateNamesRules(t *testing.T) {
	if !strings.Contains(checkRule, "fixed_window") || !strings.Contains(checkRule, fmt.Sprint(checkLimit)) {
		t.Errorf("the check rule reads %q", checkRule)
	}
	v := fakeView()
	rules := func(items, login uint64) []ruleJSON {
		return []ruleJSON{{Name: "items", Algorithm: "token_bucket", Limit: 20, Window: "1s", Key: "header:X-Api-Key", Admitted: items},
			{Name: "login", Algorithm: "sliding_log", Limit: 5, Window: "10s", Key: "user", Admitted: login}}
	}
	for n := range 3 {
		v.fakePoll(n, []string{"n1", "n2", "n3"}, "closed", nil)
		v.nodes[n].dbg.Rules = rules(100, 7)
		v.fakePoll(n, []string{"n1", "n2", "n3"}, "closed", nil)
		v.nodes[n].dbg.Rules = rules(100+uint64(n+1)*10, 8)
	}
	v.fakePoll(2, nil, "", nil) // n3 down: its rules do not count
	last := time.Now().UnixMilli()/checkWindow.Milliseconds() - 1
	v.gen.checks = map[checkWindowKey]int{{"hot-0", last}: 3}
	b, err := v.state(false)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Rules   []ruleJSON `json:"rules"`
		Windows struct {
			Busiest []map[string]any `json:"busiest"`
		} `json:"windows"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	want := rules(10+20, 1+1)
	if !slices.Equal(s.Rules, want) {
		t.Errorf("rules %+v, want %+v", s.Rules, want)
	}
	if len(s.Windows.Busiest) != 1 || s.Windows.Busiest[0]["rule"] != checkRule {
		t.Errorf("busiest keys %v: each must name its rule %q", s.Windows.Busiest, checkRule)
	}
}

// The one-line view writes its units out: a node's members and keys, and
// which figures are per second.
func TestPlainLineUnits(t *testing.T) {
	v := fakeView()
	for n := range 3 {
		v.fakePoll(n, []string{"n1", "n2", "n3"}, "closed", nil)
		v.nodes[n].dbg.Stats.Keys = 23
		v.nodes[n].dbg.Rules = []ruleJSON{{Name: "items", Algorithm: "token_bucket", Limit: 20, Window: "1s", Admitted: 5}}
		v.fakePoll(n, []string{"n1", "n2", "n3"}, "closed", nil)
		v.nodes[n].dbg.Rules = []ruleJSON{{Name: "items", Algorithm: "token_bucket", Limit: 20, Window: "1s", Admitted: 9}}
	}
	var b strings.Builder
	v.line(&b)
	line := b.String()
	for _, want := range []string{"n1:up(3 members,23 keys)", " req/s=", " allowed/s=", " denied/s=", " errors_total=", "items=12 admitted/s(limit 20 per 1s)"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	if regexp.MustCompile(`\d+[km]\b`).MatchString(line) {
		t.Errorf("line %q has a bare count with a unit letter", line)
	}
}
