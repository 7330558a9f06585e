package hold

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/ring"
)

// The deterministic simulator: 3–7 nodes, each the real Core beside a real
// local.Limiter, driven by one seeded random source through one event
// queue. Time is simulated (µs); nothing runs concurrently, so a seed
// replays its schedule exactly.
//
// What it drives: per-link FIFO delivery with random delays; dropped
// connections (the messages in flight on a link are lost); one-way and
// two-way partitions; process pauses (a paused node handles nothing until
// it resumes); false deaths (a member taken out of other members' views
// while it runs and answers); crashes with restarts (all memory lost);
// joins; graceful leaves; a write-behind store with versioned
// (compare-and-set) writes; clock skew.
//
// The invariant: for every key, the hits admitted are at most what one
// in-memory limiter admits for the same calls. The rules' windows outlast
// a run, so that is the key's capacity C. The exception is a holder that
// becomes unreachable to the key's next owner: a crash, or a cut that
// outlasts the pull's timeout. Each such episode (a store load after an
// unreachable pull, a store decision after a forward failed) may add at
// most C: admitted ≤ C × (1 + episodes). Liveness: every call made on a
// node that did not crash is answered once the faults heal.

const (
	us = int64(1)
	ms = 1000 * us
)

type simConfig struct {
	seed   uint64
	nodes  int   // at the start
	keys   int   //
	faults int   // fault events in a run
	span   int64 // µs over which calls and faults are spread
	bugs   Bug
	kinds  uint // the kinds of fault drawn (see fault)
}

type event struct {
	at  int64
	seq uint64
	fn  func()
}

type eventQ []*event

func (q eventQ) Len() int { return len(q) }
func (q eventQ) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q eventQ) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQ) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQ) Pop() any     { o := *q; x := o[len(o)-1]; *q = o[:len(o)-1]; return x }
func heapPop(q *eventQ) *event { return heap.Pop(q).(*event) }

func (s *sim) at(t int64, fn func()) {
	s.seq++
	heap.Push(&s.q, &event{at: max(t, s.now), seq: s.seq, fn: fn})
}

type sim struct {
	cfg  simConfig
	rng  *rand.Rand
	now  int64
	seq  uint64
	q    eventQ
	base int64 // ms since the epoch at sim time 0

	nodes   map[string]*snode
	members []string // the members in the truth (alive, joined, not left)
	nextID  int
	links   map[[2]string]*link
	store   *simStore
	rules   map[string]ringlimit.Rule
	keys    []string

	admitted    map[string]int64
	episodes    map[string]int64
	calls       []*scall
	msgs        int
	parked      map[*scall]func(ringlimit.Decision) // forwarded calls an owner parked on a pull
	parkedMoved map[*scall]func(to string)
	cutPull     map[string]bool // node+key: a pull of it failed across a cut
	log         []string        // the last events, printed with a violation
	trace       bool
}

type link struct {
	last    int64 // the last delivery scheduled: FIFO
	conn    int   // bumped by a dropped connection: older messages are lost
	blocked int64 // until then, nothing gets through
}

type snode struct {
	name     string
	inc      int
	alive    bool
	joined   bool
	paused   int64 // handles nothing before
	skew     int64 // ms
	core     *Core
	lim      *local.Limiter
	vers     map[string]Version
	view     []string
	waiting  map[string][]*scall // calls parked on a pull
	served   map[uint64]ringlimit.Decision
	pushes   int // unconfirmed push batches
	pushFail bool
	sentDone uint64 // the view id of the last Done sent
}

type scall struct {
	id       uint64
	key      string
	origin   string
	inc      int
	issued   int64
	done     bool
	dropped  bool // its node crashed
	hops     int
	tries    int
	answered int64
}

type simStore struct {
	lim  *local.Limiter
	vers map[string]Version
	drop int // writes refused as older than the stored version
}

type simClock struct {
	s    *sim
	skew *int64
}

func (c simClock) Now() time.Time {
	return time.UnixMilli(c.s.base + c.s.now/ms + *c.skew)
}

func newSim(cfg simConfig) *sim {
	s := &sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)),
		base: 1_700_000_000_000 + 3600_000, nodes: map[string]*snode{}, links: map[[2]string]*link{},
		rules: map[string]ringlimit.Rule{}, admitted: map[string]int64{}, episodes: map[string]int64{}, parked: map[*scall]func(ringlimit.Decision){}, parkedMoved: map[*scall]func(string){}, cutPull: map[string]bool{}}
	var zero int64
	s.store = &simStore{lim: local.New(local.Config{MaxKeys: 1024, Clock: simClock{s, &zero}}), vers: map[string]Version{}}
	for i := range cfg.keys {
		k := fmt.Sprintf("k%d", i)
		s.keys = append(s.keys, k)
		alg := []ringlimit.Algorithm{ringlimit.FixedWindow, ringlimit.TokenBucket, ringlimit.SlidingWindow, ringlimit.LeakyBucket}[i%4]
		// Windows far longer than a run: the exact limiter admits C in all.
		s.rules[k] = ringlimit.Rule{Algorithm: alg, Limit: int64(3 + s.rng.IntN(5)), Window: 24 * time.Hour}
	}
	return s
}

func (s *sim) logf(format string, args ...any) {
	if !s.trace && len(s.log) >= 400 {
		copy(s.log, s.log[200:])
		s.log = s.log[:200]
	}
	s.log = append(s.log, fmt.Sprintf("%8.3fms ", float64(s.now)/float64(ms))+fmt.Sprintf(format, args...))
}

func (s *sim) rnd(lo, hi int64) int64 { return lo + s.rng.Int64N(hi-lo+1) }

// --- membership -------------------------------------------------------

func viewID(members []string) uint64 { return xxhash.Sum64String(strings.Join(members, "\x00")) }

func without(ms []string, x string) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		if m != x {
			out = append(out, m)
		}
	}
	return out
}

// spread sends each live node the view members (less what it wrongly
// thinks dead, except) after a gossip delay, in order.
func (s *sim) spread(except map[string][]string) {
	for _, name := range sortedKeys((s.nodes)) {
		n := s.nodes[name]
		if !n.alive {
			continue
		}
		v := slices.Clone(s.members)
		for _, x := range except[name] {
			if x != name {
				v = without(v, x)
			}
		}
		if !slices.Contains(v, name) && n.joined {
			continue // leaving or gone: its own view no longer changes
		}
		d := s.rnd(1*ms, 60*ms)
		lk := s.link("gossip", name)
		t := max(s.now+d, lk.last+1)
		lk.last = t
		inc := n.inc
		s.at(t, func() { s.setView(name, inc, v) })
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// simView is a ring that knows each member's incarnation.
type simView struct {
	*ring.Ring
	incs map[string]uint64
}

func (v simView) Incarnation(name string) uint64 { return v.incs[name] }

func (s *sim) newRing(ms []string) View {
	incs := map[string]uint64{}
	for _, m := range ms {
		if n := s.nodes[m]; n != nil {
			incs[m] = uint64(n.inc)
		}
	}
	return simView{ring.New(ms, 8), incs}
}

func (s *sim) setView(name string, inc int, v []string) {
	n := s.nodes[name]
	if n == nil || !n.alive || n.inc != inc {
		return
	}
	if n.paused > s.now {
		s.at(n.paused, func() { s.setView(name, inc, v) })
		return
	}
	if slices.Equal(n.view, v) {
		return
	}
	n.view = v
	if !slices.Contains(v, name) {
		return
	}
	if len(v) > 1 {
		n.joined = true
	}
	s.logf("%s view %v", name, v)
	was := n.core.Joined()
	n.core.SetView(s.newRing(v), s.newRing(without(v, name)), viewID(v), s.nodeNow(n))
	s.pushAll(n)
	if !was && n.core.Joined() {
		for _, key := range sortedKeys(n.waiting) {
			s.again(n, key)
		}
	}
}

// again runs the calls parked on key at n through the core once more.
func (s *sim) again(n *snode, key string) {
	ws := n.waiting[key]
	delete(n.waiting, key)
	for _, c := range ws {
		fin, moved := s.parked[c], s.parkedMoved[c]
		if fin == nil {
			s.route(n, c, "")
			continue
		}
		a := n.core.Call(Call{Key: key, Hash: ring.Hash(key), Has: n.lim.Has(key), Forwarded: true, Now: s.nodeNow(n)})
		switch a.Kind {
		case Decide:
			delete(s.parked, c)
			delete(s.parkedMoved, c)
			fin(s.decide(n, c))
		case Moved:
			delete(s.parked, c)
			delete(s.parkedMoved, c)
			moved(a.To)
		default:
			n.waiting[key] = append(n.waiting[key], c)
			if a.Kind == Pull {
				s.pull(n, key, a.To, a.Inc)
			} else if a.Kind == Load {
				s.load(n, key)
			}
		}
	}
}

// --- network ----------------------------------------------------------

func (s *sim) link(a, b string) *link {
	k := [2]string{a, b}
	l := s.links[k]
	if l == nil {
		l = &link{}
		s.links[k] = l
	}
	return l
}

// send delivers fn at to after a delay, in order on the link, unless the
// link is cut or dropped meanwhile, or to crashed.
func (s *sim) send(from, to string, fn func()) {
	s.msgs++
	l := s.link(from, to)
	if l.blocked > s.now {
		return
	}
	t := max(s.now+s.rnd(50*us, 3*ms), l.last+1)
	if s.rng.IntN(20) == 0 {
		t += s.rnd(5*ms, 40*ms) // a slow packet: the link is FIFO, so the rest wait too
	}
	l.last = t
	conn := l.conn
	dst := s.nodes[to]
	if dst == nil {
		return
	}
	inc := dst.inc
	s.at(t, func() {
		if l.conn != conn || l.blocked > s.now {
			return
		}
		s.deliver(to, inc, fn)
	})
}

func (s *sim) deliver(to string, inc int, fn func()) {
	n := s.nodes[to]
	if n == nil || !n.alive || n.inc != inc {
		return
	}
	if n.paused > s.now {
		s.at(n.paused, func() { s.deliver(to, inc, fn) })
		return
	}
	fn()
}

// rpc sends a request and calls reply with the answer, or fail if none
// came within timeout (the answer is then ignored).
func (s *sim) rpc(from, to string, timeout int64, req func(reply func(func())), fail func()) {
	fromInc := s.nodes[from].inc
	settled := false
	s.at(s.now+timeout, func() {
		if settled {
			return
		}
		settled = true
		s.deliver(from, fromInc, fail)
	})
	s.send(from, to, func() {
		req(func(answer func()) {
			s.send(to, from, func() {
				if settled || s.nodes[from].inc != fromInc {
					return
				}
				settled = true
				answer()
			})
		})
	})
}

// --- nodes ------------------------------------------------------------

func (s *sim) nodeNow(n *snode) int64 { return s.base + s.now/ms + n.skew }

func (s *sim) start(name string) *snode {
	n := s.nodes[name]
	if n == nil {
		n = &snode{name: name}
		s.nodes[name] = n
	}
	n.inc++
	n.alive, n.joined, n.paused = true, false, 0
	n.skew = s.rnd(-50, 50)
	n.core = New(name)
	n.core.Inc = uint64(n.inc)
	n.core.Seeded = true
	n.core.Stored = true
	n.core.SetBugs(s.cfg.bugs)
	n.lim = local.New(local.Config{MaxKeys: 1024, Clock: simClock{s, &n.skew}, Hash: ring.Hash})
	n.vers = map[string]Version{}
	n.view = nil
	n.waiting = map[string][]*scall{}
	n.served = map[uint64]ringlimit.Decision{}
	n.pushes, n.sentDone, n.pushFail = 0, 0, false
	n.core.SetView(s.newRing([]string{name}), s.newRing(nil), viewID([]string{name}), s.nodeNow(n))
	n.view = []string{name}
	s.members = append(s.members, name)
	slices.Sort(s.members)
	s.logf("%s starts (inc %d)", name, n.inc)
	s.spread(nil)
	return n
}

func (s *sim) crash(name string) {
	n := s.nodes[name]
	s.logf("%s crashes", name)
	for _, k := range s.keys {
		if n.lim.Has(k) || n.core.HasCopy(k) {
			s.episodes[k]++ // what it did not write behind is lost
		}
	}
	n.alive = false
	for _, c := range s.calls {
		if c.origin == name && c.inc == n.inc && !c.done {
			c.dropped = true
		}
	}
	s.members = without(s.members, name)
	s.spread(nil)
}

// leave is a graceful leave: push everything, then go.
func (s *sim) leave(name string) {
	n := s.nodes[name]
	if !n.alive || n.core.Leaving() || len(s.members) < 2 {
		return
	}
	if n.paused > s.now {
		// A paused process does nothing, Close included.
		s.at(n.paused, func() { s.leave(name) })
		return
	}
	s.logf("%s leaves", name)
	n.core.Leave(s.newRing(without(n.view, name)))
	s.pushAll(n)
	inc := n.inc
	// It leaves the gossip once its push is confirmed (or after a bound),
	// then answers what its peers still send for a while, then stops.
	var wait func(int)
	wait = func(tries int) {
		if n.inc != inc || !n.alive {
			return
		}
		if n.pushes > 0 && tries < 50 {
			s.at(s.now+5*ms, func() { wait(tries + 1) })
			return
		}
		s.members = without(s.members, name)
		s.spread(nil)
		s.at(s.now+200*ms, func() {
			if n.inc == inc && n.alive {
				s.logf("%s stops", name)
				n.alive = false
				for _, c := range s.calls {
					if c.origin == name && c.inc == inc && !c.done {
						c.dropped = true
					}
				}
			}
		})
	}
	wait(0)
}

// pushAll pushes every state whose key another member owns in n's view
// (or in the ring without n, while it leaves), then Done.
func (s *sim) pushAll(n *snode) {
	byTo := map[string][]string{}
	n.lim.Range(func(key string, _ local.State) bool {
		if o := n.core.Owner(ring.Hash(key)); o != n.name && o != "" {
			byTo[o] = append(byTo[o], key)
		}
		return true
	})
	now := s.nodeNow(n)
	for _, to := range sortedKeys((byTo)) {
		var items []pushed
		for _, key := range byTo[to] {
			st, ok := n.lim.Take(key)
			if !ok {
				continue
			}
			ver := n.vers[key].Next(now)
			delete(n.vers, key)
			c := st
			n.core.Gave(key, to, ver, &c, st.Until)
			items = append(items, pushed{key, st, ver, n.core.MarkInc(key)})
		}
		if len(items) > 0 {
			s.push(n, to, items, 0)
		}
	}
	s.maybeDone(n)
}

type pushed struct {
	key string
	st  ringlimit.State
	ver Version
	inc uint64 // the incarnation it is meant for
}

func (s *sim) push(n *snode, to string, items []pushed, try int) {
	n.pushes++
	inc := n.inc
	s.logf("%s pushes %d to %s", n.name, len(items), to)
	s.rpc(n.name, to, 150*ms, func(reply func(func())) {
		t := s.nodes[to]
		var refused []pushed
		for _, it := range items {
			if !s.arrive(t, n.name, it) {
				refused = append(refused, it)
			}
		}
		reply(func() {
			n.pushes--
			for _, it := range items {
				if !slices.ContainsFunc(refused, func(r pushed) bool { return r.key == it.key }) {
					n.core.Confirmed(it.key, to)
				}
			}
			for _, it := range refused {
				// Refused (it leaves): take it back, and on to its owner.
				if st, ver, ok := n.core.TakeBack(it.key, to); ok {
					if !n.lim.Has(it.key) {
						n.lim.Import(it.key, *st)
						n.vers[it.key] = ver
					}
					s.release(n, it.key, false)
				}
			}
			s.maybeDone(n)
		})
	}, func() {
		if n.inc != inc {
			return
		}
		n.pushes--
		if try < 3 && slices.Contains(s.members, to) {
			// Again, with what the marks still hold for to: a copy that
			// came back here meanwhile is not sent.
			var again []pushed
			for _, it := range items {
				if st, ver, ok := n.core.Pending(it.key, to); ok {
					again = append(again, pushed{it.key, *st, ver, it.inc})
				}
			}
			if len(again) > 0 {
				s.push(n, to, again, try+1)
			}
			return
		}
		// Undeliverable: the marks keep the copies (the target, or its
		// next owner, pulls them); the store gets them too, for a crash.
		n.pushFail = true
		for _, it := range items {
			if st, ver, ok := n.core.Pending(it.key, to); ok {
				s.storeWrite(it.key, *st, ver)
			}
		}
	})
}

// arrive installs a pushed state at t; false if t refused it.
func (s *sim) arrive(t *snode, from string, it pushed) bool {
	h := ring.Hash(it.key)
	held := s.held(t, it.key)
	install, on, refused := t.core.Arrived(Arrival{Key: it.key, Hash: h, From: from, Inc: it.inc, Ver: it.ver, Has: held != nil, Held: ptrOr(held), Now: s.nodeNow(t)})
	s.logf("%s arrived %s from %s ver %v: install=%v on=%q refused=%v", t.name, it.key, from, it.ver, install, on, refused)
	if refused {
		return false
	}
	if !install {
		return true
	}
	s.install(t, it.key, it.st, it.ver)
	s.release(t, it.key, false) // (on says where it goes next)
	if on != "" {
		st, ok := t.lim.Take(it.key)
		if ok {
			ver := it.ver.Next(s.nodeNow(t))
			c := st
			t.core.Gave(it.key, on, ver, &c, st.Until)
			delete(t.vers, it.key)
			s.push(t, on, []pushed{{it.key, st, ver, t.core.MarkInc(it.key)}}, 0)
		}
	}
	return true
}

// maybeDone sends Done to every member once n's push is confirmed and it
// expects nothing more.
func (s *sim) maybeDone(n *snode) {
	if n.pushes > 0 || n.pushFail || !n.core.Clean() || n.core.Leaving() {
		return
	}
	id := n.core.ViewID()
	if n.sentDone == id {
		return
	}
	n.sentDone = id
	for _, m := range n.view {
		if m == n.name {
			continue
		}
		to := m
		s.send(n.name, to, func() {
			t := s.nodes[to]
			if t.core.Done(n.name, id) {
				s.maybeDone(t)
			}
		})
	}
}

// --- calls ------------------------------------------------------------

func (s *sim) issue(origin, key string) {
	n := s.nodes[origin]
	if n == nil || !n.alive || n.core.Leaving() {
		return
	}
	s.seq++
	c := &scall{id: s.seq, key: key, origin: origin, inc: n.inc, issued: s.now}
	s.calls = append(s.calls, c)
	s.deliver(origin, n.inc, func() { s.route(n, c, "") })
}

// route runs a call made on n.
func (s *sim) route(n *snode, c *scall, via string) {
	if c.done || c.dropped {
		return
	}
	a := n.core.Call(Call{Key: c.key, Hash: ring.Hash(c.key), Has: n.lim.Has(c.key), Via: via, Now: s.nodeNow(n)})
	s.logf("%s call %d %s via %q: %s %s", n.name, c.id, c.key, via, a.Kind, a.To)
	switch a.Kind {
	case Decide:
		s.finish(c, s.decide(n, c))
	case Forward:
		s.forward(n, c, a.To, "")
	case Pull, Wait:
		n.waiting[c.key] = append(n.waiting[c.key], c)
		if a.Kind == Pull {
			s.pull(n, c.key, a.To, a.Inc)
		}
	case Load:
		n.waiting[c.key] = append(n.waiting[c.key], c)
		s.load(n, c.key)
	default:
		panic("route: " + a.Kind.String())
	}
}

// held is the version of key's state at n, nil if it holds none.
func (s *sim) held(n *snode, key string) *Version {
	if !n.lim.Has(key) {
		return nil
	}
	v := n.vers[key]
	return &v
}

func ptrOr(v *Version) Version {
	if v == nil {
		return Version{}
	}
	return *v
}

// install puts st (version ver) in n's store, merged with the state there
// if there is one (they were started apart: the core checked).
func (s *sim) install(n *snode, key string, st ringlimit.State, ver Version) {
	if cur, ok := n.lim.Take(key); ok {
		s.logf("%s merges %s: %v + %v", n.name, key, n.vers[key].Origins, ver.Origins)
		st = local.Merge(cur, st)
		ver = Join(n.vers[key], ver)
	}
	n.lim.Import(key, st)
	n.vers[key] = ver
}

func (s *sim) decide(n *snode, c *scall) ringlimit.Decision {
	s.logf("%s decides call %d (%s) from %s", n.name, c.id, c.key, c.origin)
	if d, ok := n.served[c.id]; ok {
		return d // a retried forward: decided once
	}
	d, err := n.lim.AllowNAt(time.UnixMilli(s.nodeNow(n)), c.key, s.rules[c.key], 1)
	if err != nil {
		panic(err)
	}
	n.served[c.id] = d
	if d.Allowed {
		s.admitted[c.key]++
		if n.vers[c.key].Epoch == 0 {
			n.vers[c.key] = Fresh(s.nodeNow(n), s.rng.Uint64()|1) // a fresh start here
		}
		s.logf("%s admits %s (#%d, call %d)", n.name, c.key, s.admitted[c.key], c.id)
	}
	return d
}

func (s *sim) finish(c *scall, d ringlimit.Decision) {
	if c.done {
		return
	}
	c.done, c.answered = true, s.now
}

// forward sends c to the member to; via is the member that said it moved
// there.
func (s *sim) forward(n *snode, c *scall, to, via string) {
	inc := n.inc
	s.rpc(n.name, to, 100*ms, func(reply func(func())) {
		t := s.nodes[to]
		a := t.core.Call(Call{Key: c.key, Hash: ring.Hash(c.key), Has: t.lim.Has(c.key), Forwarded: true, Via: via, Now: s.nodeNow(t)})
		s.logf("%s fwd call %d %s from %s via %q: %s %s", t.name, c.id, c.key, n.name, via, a.Kind, a.To)
		switch a.Kind {
		case Decide:
			d := s.decide(t, c)
			reply(func() { s.finish(c, d) })
		case Moved:
			reply(func() {
				c.hops++
				if c.hops > 4 {
					s.storeDecide(n, c)
					return
				}
				if a.To == n.name {
					s.route(n, c, to)
					return
				}
				s.forward(n, c, a.To, to)
			})
		case Pull, Wait, Load:
			// The owner waits for the state and answers then: park a
			// stand-in whose decision goes back to the caller.
			st := &scall{id: c.id, key: c.key, origin: to, inc: t.inc, issued: s.now}
			st.answered = -1
			t.waiting[c.key] = append(t.waiting[c.key], st)
			s.parked[st] = func(d ringlimit.Decision) { reply(func() { s.finish(c, d) }) }
			s.parkedMoved[st] = func(next string) {
				reply(func() {
					c.hops++
					if c.hops > 4 {
						s.storeDecide(n, c)
						return
					}
					if next == n.name {
						s.route(n, c, to)
						return
					}
					s.forward(n, c, next, to)
				})
			}
			if a.Kind == Pull {
				s.pull(t, c.key, a.To, a.Inc)
			} else if a.Kind == Load {
				s.load(t, c.key)
			}
		default:
			panic("forwarded: " + a.Kind.String())
		}
	}, func() {
		if n.inc != inc || c.done {
			return
		}
		c.tries++
		if c.tries < 3 && slices.Contains(n.view, to) {
			s.forward(n, c, to, via) // the same call: the owner decides it once
			return
		}
		s.storeDecide(n, c)
	})
}

// storeDecide decides c at the store: the owner could not be reached.
func (s *sim) storeDecide(n *snode, c *scall) {
	if c.done {
		return
	}
	s.episodes[c.key]++
	d, err := s.store.lim.AllowNAt(time.UnixMilli(s.base+s.now/ms), c.key, s.rules[c.key], 1)
	if err != nil {
		panic(err)
	}
	if d.Allowed {
		s.admitted[c.key]++
		s.logf("store admits %s for %s (#%d)", c.key, n.name, s.admitted[c.key])
	}
	s.finish(c, d)
}

// pull asks to for key's state on n's behalf.
func (s *sim) pull(n *snode, key, to string, want uint64) { s.pullGone(n, key, to, want, "", 0) }

func (s *sim) pullGone(n *snode, key, to string, want uint64, gone string, goneInc uint64) {
	inc := n.inc
	h := ring.Hash(key)
	path := slices.Clone(n.core.Path(key))
	s.logf("%s pulls %s from %s (inc %d)", n.name, key, to, want)
	s.rpc(n.name, to, 80*ms, func(reply func(func())) {
		t := s.nodes[to]
		defer func() { s.logf("%s asked %s by %s", t.name, key, n.name) }()
		r := t.core.Asked(Ask{Key: key, Hash: h, From: n.name, Inc: want, Path: path, Gone: gone, GoneInc: goneInc, Has: t.lim.Has(key), Now: s.nodeNow(t)})
		a := r.A
		switch {
		case r.Give:
			st, ok := t.lim.Take(key)
			ver := t.vers[key].Next(s.nodeNow(t))
			delete(t.vers, key)
			if ok {
				c := st
				t.core.Gave(key, n.name, ver, &c, st.Until)
				a = Answer{Kind: State, St: &st, Ver: ver}
			} else {
				a = Answer{Kind: None}
			}
		case r.Keep:
			st, ok := t.lim.Export(key)
			if ok {
				a = Answer{Kind: State, St: &st, Ver: t.vers[key]}
			}
		}
		reply(func() { s.pulled(n, key, to, a) })
	}, func() {
		if n.inc != inc {
			return
		}
		if s.link(n.name, to).blocked > s.now-80*ms || s.link(to, n.name).blocked > s.now-80*ms {
			s.cutPull[n.name+"\x00"+key] = true // a cut, not a pause, kept the answer away
		}
		s.pulled(n, key, to, Answer{Kind: Unreachable})
	})
}

func (s *sim) pulled(n *snode, key, from string, a Answer) {
	h := ring.Hash(key)
	s.logf("%s pulled %s from %s: %d %s", n.name, key, from, a.Kind, a.To)
	act := n.core.Pulled(key, h, from, a, s.held(n, key), s.nodeNow(n))
	s.logf("%s pulled %s: ver %v -> %s %s install=%v", n.name, key, a.Ver, act.Kind, act.To, act.Install)
	if a.Kind == Unreachable && act.Kind != Pull {
		// Given up on a member: if a cut (a partition that lasts) kept
		// its answers away, or it holds the key now, the key may have been
		// held on the far side: the exception the bound allows for. A
		// member that was only paused is not one.
		cut := s.cutPull[n.name+"\x00"+key]
		delete(s.cutPull, n.name+"\x00"+key)
		if t := s.nodes[from]; t.alive && (cut || t.lim.Has(key) || t.core.HasCopy(key)) {
			s.episodes[key]++
		}
	}
	if act.Install {
		if act.St != nil {
			s.install(n, key, *act.St, act.Ver)
		} else {
			s.install(n, key, *a.St, a.Ver)
		}
		// Confirm: the member drops the copy it kept.
		me := n.name
		s.send(me, from, func() { s.nodes[from].core.Confirmed(key, me) })
	}
	switch act.Kind {
	case Pull:
		s.pullGone(n, key, act.To, act.Inc, act.Gone, act.GoneInc)
	case Load:
		s.load(n, key)
	case Decide:
		s.release(n, key, true)
	case Forward:
		if act.PushTo != "" {
			s.pushTo(n, key, act.PushTo)
		}
		s.redirect(n, key, act.To)
	}
}

// pushTo pushes key's state, if held here, to the member to.
func (s *sim) pushTo(n *snode, key, to string) {
	if st, ok := n.lim.Take(key); ok {
		ver := n.vers[key].Next(s.nodeNow(n))
		delete(n.vers, key)
		c := st
		n.core.Gave(key, to, ver, &c, st.Until)
		s.push(n, to, []pushed{{key, st, ver, n.core.MarkInc(key)}}, 0)
	}
}

// redirect sends the calls parked on key at n to the member to: n's own
// calls are forwarded, the ones forwarded to n answered "moved".
func (s *sim) redirect(n *snode, key, to string) {
	ws := n.waiting[key]
	delete(n.waiting, key)
	for _, c := range ws {
		if fin := s.parkedMoved[c]; fin != nil {
			delete(s.parkedMoved, c)
			delete(s.parked, c)
			fin(to)
			continue
		}
		s.forward(n, c, to, "")
	}
}

// load installs key's state from the store, then decides what waits.
func (s *sim) load(n *snode, key string) {
	inc := n.inc
	s.logf("%s loads %s from the store", n.name, key)
	s.at(s.now+s.rnd(100*us, 2*ms), func() {
		if n.inc != inc || !n.alive {
			return
		}
		if st, ok := s.store.lim.Export(key); ok && !n.lim.Has(key) {
			n.lim.Import(key, st)
			// A load starts a branch of its own: two nodes that load one
			// key apart merge when they meet (counting the snapshot
			// twice: they admit less, never more).
			now := s.nodeNow(n)
			n.vers[key] = Join(s.store.vers[key].Next(now), Fresh(now, s.rng.Uint64()|1))
		}
		if a := n.core.Loaded(key); a.Kind == Forward {
			s.redirect(n, key, a.To)
			return
		}
		s.release(n, key, true)
	})
}

// release decides every call parked on key at n: the state is here now, or
// the key starts here.
func (s *sim) release(n *snode, key string, stray bool) {
	ws := n.waiting[key]
	delete(n.waiting, key)
	for _, c := range ws {
		if fin := s.parked[c]; fin != nil {
			delete(s.parked, c)
			delete(s.parkedMoved, c)
			d := s.decide(n, c)
			fin(d)
			continue
		}
		s.finish(c, s.decide(n, c))
	}
	if stray {
		s.pushStray(n, key)
	}
}

// pushStray pushes key's state to its owner if it is held here and another
// member owns it in n's view.
func (s *sim) pushStray(n *snode, key string) {
	to := n.core.Stray(ring.Hash(key))
	if to == "" || n.core.Leaving() {
		return
	}
	if st, ok := n.lim.Take(key); ok {
		ver := n.vers[key].Next(s.nodeNow(n))
		delete(n.vers, key)
		c := st
		n.core.Gave(key, to, ver, &c, st.Until)
		s.push(n, to, []pushed{{key, st, ver, n.core.MarkInc(key)}}, 0)
	}
}

// --- store ------------------------------------------------------------

func (s *sim) storeWrite(key string, st ringlimit.State, ver Version) {
	if old, ok := s.store.vers[key]; ok && !old.Less(ver) {
		s.store.drop++
		return
	}
	s.store.lim.Take(key)
	s.store.lim.Import(key, st)
	s.store.vers[key] = ver
}

// writeBehind writes n's states to the store, each with its next version.
func (s *sim) writeBehind(n *snode) {
	if !n.alive || n.paused > s.now {
		return
	}
	type w struct {
		key string
		st  ringlimit.State
		ver Version
	}
	var ws []w
	n.lim.Range(func(key string, st local.State) bool {
		v := n.vers[key]
		v.Seq++
		n.vers[key] = v
		ws = append(ws, w{key, st, v})
		return true
	})
	for _, x := range ws {
		// The write travels: a late one must not overwrite a newer state.
		s.at(s.now+s.rnd(100*us, 30*ms), func() { s.storeWrite(x.key, x.st, x.ver) })
	}
}
