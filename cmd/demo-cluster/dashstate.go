package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// historyLen is how many seconds of decisions per second the dashboard's
// charts show.
const historyLen = 60

// dashState is the cluster as the view last polled it, for the dashboard.
type dashState struct {
	UpS     float64     `json:"up_s"`
	Store   storeJSON   `json:"store"`
	Traffic trafficJSON `json:"traffic"`
	Nodes   []nodeJSON  `json:"nodes"`
	Ring    ringJSON    `json:"ring"`
	Windows windowsJSON `json:"windows"`
	Rules   []ruleJSON  `json:"rules"`  // the API's rules, Admitted per second over the nodes, by name
	Events  []string    `json:"events"` // the latest, oldest first
	Chaos   bool        `json:"chaos"`  // the scripted chaos is under way
}

type storeJSON struct {
	Kind string `json:"kind"`
	Addr string `json:"addr"`
	Up   bool   `json:"up"`
}

// trafficJSON is what the generator saw: the answers of the last window
// (the time since the previous sample, about a second), all from one
// snapshot of the counters so that Req = Allowed + Denied + Failed, and the
// errors so far.
type trafficJSON struct {
	Rate     int    `json:"rate"`
	Req      uint64 `json:"req_s"`     // answered in the window
	Allowed  uint64 `json:"allowed_s"` // of which admitted
	Denied   uint64 `json:"denied_s"`  // 429
	Failed   uint64 `json:"failed_s"`  // errors, and requests lost with a killed node
	Errors   uint64 `json:"errors"`    // so far, from nodes that were up
	ToKilled uint64 `json:"to_killed"` // so far, requests lost with a killed node
}

type nodeJSON struct {
	Name         string            `json:"name"`
	HTTP         string            `json:"http"`
	Up           bool              `json:"up"`
	Members      int               `json:"members"`
	Keys         int               `json:"keys"`
	StoreBreaker string            `json:"store_breaker,omitempty"`
	PeerBreakers map[string]string `json:"peer_breakers,omitempty"`
	// History holds the decisions per second by source (local, peer,
	// store, fallback), one entry a second, oldest first.
	History [][4]uint64 `json:"history"`
}

// ringJSON is the ring as one live node sees it.
type ringJSON struct {
	SeenBy  string    `json:"seen_by"`
	Members []string  `json:"members"`
	Share   []float64 `json:"share"` // of the hash space, per member, exact
	Arcs    []arcJSON `json:"arcs"`  // what the dashboard draws (see shareArcs)
	VArcs   int       `json:"varcs"` // the ring's own arcs, for the note
}

// ringSectors is how many equal sectors the dashboard's ring is drawn in:
// even, so that the arcs of the last and the first merge across zero.
const ringSectors = 8

// arcJSON is an arc with its ends as fractions of the hash space.
type arcJSON struct {
	From  float64 `json:"f"`
	To    float64 `json:"t"`
	Owner int     `json:"o"` // index in Members
}

// windowsJSON holds /v1/allow's last whole window per key against the limit.
type windowsJSON struct {
	Limit   int        `json:"limit"`
	Window  string     `json:"window"`
	Busiest []keyCount `json:"busiest"` // the last whole window's, busiest first
	Over    int        `json:"over"`    // key-windows over the limit so far
}

type keyCount struct {
	Key      string `json:"key"`
	Rule     string `json:"rule"` // the rule its hits were decided by
	Admitted int    `json:"admitted"`
}

// checkRule names the rule every /v1/allow request of the generator asks
// for, as the busiest keys show it.
var checkRule = fmt.Sprintf("/v1/allow: fixed_window, %d per %s per key", checkLimit, checkWindow)

// dashWatch is what the view keeps between polls for the dashboard.
type dashWatch struct {
	hist     [][][4]uint64       // per node
	breakers []map[string]string // per node: "store" or a peer's name → state
	inRing   map[string]bool     // members of the ring at the last poll
	wasIn    map[string]bool     // members ever seen in the ring
	ringKey  string              // the members the arcs were built for
	ring     ringJSON
	traffic  trafficJSON
	prevTot  snapshot // the counters at the previous sample
}

// sample runs after each poll: it records each node's decisions per second,
// the generator's last second, and logs changes of the ring and breakers.
func (v *view) sample() {
	w := &v.watch
	if w.hist == nil {
		w.hist = make([][][4]uint64, len(v.nodes))
		w.breakers = make([]map[string]string, len(v.nodes))
		w.inRing, w.wasIn = map[string]bool{}, map[string]bool{}
	}
	for i, n := range v.nodes {
		var r [4]uint64
		if n.up && n.haveOld {
			for s := range r {
				r[s] = delta(n.dbg.Stats.Decisions[s], n.old.Stats.Decisions[s])
			}
		}
		w.hist[i] = append(w.hist[i], r)
		if len(w.hist[i]) > historyLen {
			w.hist[i] = w.hist[i][len(w.hist[i])-historyLen:]
		}
	}
	// One snapshot, and the previous sample's: every figure is of the same
	// window. Requests are counted as answered, not as sent: a request sent
	// in one window may be answered in the next.
	tot, prev := snap(&v.gen.total), w.prevTot
	w.prevTot = tot
	w.traffic = trafficJSON{Rate: v.rate, Allowed: tot.allowed - prev.allowed, Denied: tot.denied - prev.denied,
		Failed: tot.errors - prev.errors + tot.toKilled - prev.toKilled, Errors: tot.errors, ToKilled: tot.toKilled}
	w.traffic.Req = w.traffic.Allowed + w.traffic.Denied + w.traffic.Failed
	v.watchRing()
	v.watchBreakers()
}

// watchRing rebuilds the ring from the members the first live node sees,
// and logs who joined, left and rejoined it.
func (v *view) watchRing() {
	w := &v.watch
	by, members := "", []string(nil)
	for i, n := range v.nodes {
		if n.up && len(n.dbg.Members) > 0 {
			by, members = v.sup.nodes[i].name, n.dbg.Members
			break
		}
	}
	if by == "" {
		return // nobody to ask: keep the last ring
	}
	now := map[string]bool{}
	for _, m := range members {
		now[m] = true
		switch {
		case w.inRing[m]:
		case w.wasIn[m]:
			v.events.add("%s rejoined the ring (as %s sees it)", m, by)
		default:
			v.events.add("%s joined the ring (as %s sees it)", m, by)
		}
		w.wasIn[m] = true
	}
	for _, m := range slices.Sorted(maps.Keys(w.inRing)) {
		if !now[m] {
			v.events.add("%s left the ring (as %s sees it)", m, by)
		}
	}
	w.inRing = now
	if key := strings.Join(members, ","); key != w.ringKey || w.ring.SeenBy != by {
		w.ringKey = key
		arcs := ring.New(members, 0).Arcs()
		w.ring = ringJSON{SeenBy: by, Members: members, VArcs: len(arcs)}
		w.ring.Arcs, w.ring.Share = shareArcs(arcs, members, ringSectors)
	}
}

// shareArcs turns the ring's arcs (hundreds: one per run of virtual nodes,
// too thin to read) into a few that show each member's share where it lies:
// the ring is cut into sectors equal parts, and in each part every member
// gets one arc as long as its exact share of that part, the members in
// ascending order in even parts and descending in odd ones, so that the
// neighbours across a boundary are the same member and merge. With m
// members that is at most m·sectors − sectors + 1 arcs (one for one
// member). share is each member's exact share of the whole ring. members
// must hold every arc's owner; sectors must be even.
func shareArcs(arcs []ring.Arc, members []string, sectors int) (out []arcJSON, share []float64) {
	m := len(members)
	if m == 0 {
		return []arcJSON{}, []float64{}
	}
	owned := make([][]float64, sectors) // [sector][member]
	for i := range owned {
		owned[i] = make([]float64, m)
	}
	share = make([]float64, m)
	add := func(from, to float64, o int) { // 0 ≤ from ≤ to ≤ 1
		for from < to {
			sec := min(int(from*float64(sectors)), sectors-1)
			end := min(to, float64(sec+1)/float64(sectors))
			owned[sec][o] += end - from
			share[o] += end - from
			from = end
		}
	}
	for _, a := range arcs {
		o := slices.Index(members, a.Owner)
		from, to := float64(a.From)/(1<<64), float64(a.To)/(1<<64)
		if a.To <= a.From { // across zero, or the whole ring
			add(from, 1, o)
			add(0, to, o)
			continue
		}
		add(from, to, o)
	}
	round := func(f float64) float64 { return math.Round(f*1e5) / 1e5 }
	for sec := range sectors {
		pos, end := float64(sec)/float64(sectors), float64(sec+1)/float64(sectors)
		for k := range m {
			o := k
			if sec%2 == 1 {
				o = m - 1 - k
			}
			l := owned[sec][o]
			if l <= 0 {
				continue
			}
			if n := len(out); n > 0 && out[n-1].Owner == o {
				out[n-1].To = pos + l
			} else {
				out = append(out, arcJSON{From: pos, To: pos + l, Owner: o})
			}
			pos += l
		}
		out[len(out)-1].To = end // no gap from rounding
	}
	if n := len(out); n > 1 && out[0].Owner == out[n-1].Owner { // across zero
		out[0].From = out[n-1].From
		out = out[:n-1]
	}
	if len(out) == 1 { // one member: the whole ring, From == To
		out[0].From, out[0].To = 0, 0
	}
	for i := range out {
		out[i].From, out[i].To = round(out[i].From), round(math.Mod(out[i].To, 1))
	}
	for i := range share {
		share[i] = round(share[i])
	}
	return out, share
}

// watchBreakers logs each breaker that opened, and each that closed again,
// in the nodes that are up. A node that goes down forgets its breakers: a
// restarted one starts closed, which is no news.
func (v *view) watchBreakers() {
	w := &v.watch
	for i, n := range v.nodes {
		if !n.up {
			w.breakers[i] = nil
			continue
		}
		now := map[string]string{"store": n.dbg.Stats.StoreBreaker}
		for p, st := range n.dbg.Stats.PeerBreakers {
			now[p] = st
		}
		name := v.sup.nodes[i].name
		for _, k := range slices.Sorted(maps.Keys(now)) {
			before, st := w.breakers[i][k], now[k]
			what := "breaker for peer " + k
			if k == "store" {
				what = "store breaker"
			}
			switch {
			case st == before:
			case st == "open":
				v.events.add("%s: %s opened", name, what)
			case st == "closed" && (before == "open" || before == "half-open"):
				v.events.add("%s: %s closed again", name, what)
			}
		}
		w.breakers[i] = now
	}
}

// state returns the dashboard's view of the cluster, as JSON.
func (v *view) state(chaos bool) ([]byte, error) {
	w := &v.watch
	s := dashState{UpS: round1(time.Since(v.start)), Chaos: chaos,
		Store:   storeJSON{Kind: v.st.Kind(), Addr: v.st.Addr(), Up: v.st.Running()},
		Traffic: w.traffic, Ring: w.ring, Events: v.events.last(30)}
	if s.Ring.Members == nil {
		s.Ring.Members, s.Ring.Arcs, s.Ring.Share = []string{}, []arcJSON{}, []float64{}
	}
	// Whether a process runs is known now; the rest is from the last poll.
	up := v.sup.up()
	for i, p := range v.sup.nodes {
		n := v.nodes[i]
		nj := nodeJSON{Name: p.name, HTTP: p.httpAddr, Up: up[i] && n.up, History: [][4]uint64{}}
		if i < len(w.hist) {
			nj.History = w.hist[i]
		}
		if nj.Up {
			nj.Members, nj.Keys = len(n.dbg.Members), n.dbg.Stats.Keys
			nj.StoreBreaker, nj.PeerBreakers = n.dbg.Stats.StoreBreaker, n.dbg.Stats.PeerBreakers
		}
		s.Nodes = append(s.Nodes, nj)
	}
	last := time.Now().UnixMilli()/checkWindow.Milliseconds() - 1
	s.Windows = windowsJSON{Limit: checkLimit, Window: checkWindow.String()}
	s.Windows.Busiest, s.Windows.Over = v.gen.busiest(last, 8)
	s.Rules = v.ruleRates()
	if s.Rules == nil {
		s.Rules = []ruleJSON{}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("dashboard state: %w", err)
	}
	return b, nil
}

// busiest returns the n keys that were admitted most in window, busiest
// first, and how many key-windows so far were over the limit.
func (t *traffic) busiest(window int64, n int) ([]keyCount, int) {
	t.mu.Lock()
	var top []keyCount
	over := 0
	for k, c := range t.checks {
		if c > checkLimit {
			over++
		}
		if k.window == window {
			top = append(top, keyCount{Key: k.key, Rule: checkRule, Admitted: c})
		}
	}
	t.mu.Unlock()
	slices.SortFunc(top, func(a, b keyCount) int {
		return cmp.Or(cmp.Compare(b.Admitted, a.Admitted), cmp.Compare(a.Key, b.Key))
	})
	if len(top) > n {
		top = top[:n]
	}
	if top == nil {
		top = []keyCount{}
	}
	return top, over
}
