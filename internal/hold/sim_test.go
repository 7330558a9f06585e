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
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/ring"
)

// The deterministic simulator: 3–7 nodes, each the real Core beside a real
// memstore.Limiter, driven by one seeded random source through one event
// queue. Time is simulated (µs); nothing runs concurrently, so a seed
// replays its schedule exactly.
//
// What it drives: per-link FIFO delivery with random delays; dropped
// connections (the messages in flight on a link are lost); one-way and
// two-way partitions; process pauses (a paused node handles nothing until
// it resumes); false deaths (a member taken out of other members' views
// while it runs and answers); crashes with restarts (all memory lost);
// joins; graceful leaves, half of them a rolling restart's (the name starts
// again once the leaver stops), their news reaching the views up to 250 ms
// late; a write-behind store with versioned (compare-and-set) writes; clock
// skew; bursts of calls around each fault; node's leases of hot keys
// (lease_test.go); and, in half the stress schedules, members that crash
// and restart under their names again and again within a few ms, each slow
// to start (mix.bounce). A node's timeouts do not count
// the time it was paused itself (node's follow its own lag).
//
// The invariant: for every key, the hits admitted are at most what one
// in-memory limiter admits for the same calls. The rules' windows outlast
// a run, so that is C, what the key admits from a fresh state (its
// capacity; a leaky bucket's one more: its first hit leaves at once, and
// only hits still waiting fill the queue). The exception is a holder that
// becomes unreachable to the key's next owner: a crash, or a cut that
// outlasts the pull's timeout, or pauses and cuts that together kept it
// from answering every pull until the puller gave up. Each such episode (a
// store load after an unreachable pull, a store decision after a forward
// failed) may add at most C: admitted ≤ C × (1 + episodes). A key driven
// to its limit admits its limit: no lease keeps hits its grantor's denial
// should have recalled (checkStranded). Liveness: every call made on a
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
	bugs   bug
	kinds  uint // the kinds of fault drawn (see fault)
	mix    mix
}

// mix shapes a schedule's faults and delays. The classic search draws
// every schedule from one mix (classicMix); a swarm schedule draws its own
// (swarmMix): swarm testing (Groce et al., ISSTA 2012) finds the bugs that
// need many faults of one kind, or a fault kind left out, which a mix of
// every kind at fixed rates rarely makes.
type mix struct {
	slowPkt    int   // one delivery in slowPkt is a slow packet (0: none)
	slowMax    int64 // µs, the longest extra delay of a slow packet
	gossipMax  int64 // µs, the longest a view change takes to reach a member
	falseMax   int64 // µs, the longest a false death lasts
	restartMax int64 // µs, the longest a crashed member stays down
	restarts   bool  // a graceful leave is a rolling restart's (the same name starts again) at once, not half the time
	// stress: delays past the timeouts (slow packets longer than a
	// forward's timeout, slow gossip, more faults). A forward to a live
	// owner then times out for slowness alone and the store decides, as
	// an overloaded node's fail-open tier does: each key may add one
	// episode for those store decisions, and liveness is not checked
	// (its bound is stated for the classic envelope). Safety is.
	stress bool
	// bounce: a crashed member comes back within a few ms, and crashes
	// and comes back again, up to three times, each soon after it
	// started: the pushes its peers send it when it joins are on their way
	// when it restarts under its name (a retry then reaches a later
	// incarnation), and their pulls find it gone.
	bounce bool
}

func classicMix() mix {
	return mix{slowPkt: 20, slowMax: 40 * ms, gossipMax: 60 * ms, falseMax: 600 * ms, restartMax: 400 * ms}
}

// stressMix draws a swarm mix past the classic envelope (see mix.stress).
func stressMix(r *rand.Rand, kinds uint) (mix, uint) {
	m, kinds := swarmMix(r, kinds)
	pick := func(xs ...int64) int64 { return xs[r.IntN(len(xs))] }
	m.slowPkt = int(pick(3, 8))
	m.slowMax = pick(40*ms, 120*ms)
	m.gossipMax = pick(60*ms, 200*ms)
	m.stress = true
	return m, kinds
}

// swarmMix draws a schedule's mix from its own random source, and thins
// the kinds of fault: each kind is kept with even odds.
func swarmMix(r *rand.Rand, kinds uint) (mix, uint) {
	pick := func(xs ...int64) int64 { return xs[r.IntN(len(xs))] }
	// Delays stay within the classic envelope (the timeouts and the
	// liveness bound, maxWait, are stated for it): a swarm varies which
	// faults come, how many, and how fast members restart.
	m := mix{
		slowPkt:    int(pick(0, 20)),
		slowMax:    40 * ms,
		gossipMax:  pick(5*ms, 60*ms),
		falseMax:   pick(100*ms, 600*ms),
		restartMax: pick(5*ms, 60*ms, 400*ms),
		restarts:   r.IntN(2) == 0,
	}
	var thin uint
	for thin == 0 {
		thin = uint(r.Uint64()) & allFaults
	}
	if kinds&thin != 0 {
		kinds &= thin
	}
	return m, kinds
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
	cfg   simConfig
	rng   *rand.Rand
	now   int64
	seq   uint64
	forks uint64 // copies served as forks (their origins, see Version.Fork)
	q     eventQ
	base  int64 // ms since the epoch at sim time 0

	nodes   map[string]*snode
	members []string // the members in the truth (alive, joined, not left)
	// announced holds the members that announced their leave, in the
	// incarnation that did (node: the leave intent, ring.Membership.Leaving).
	announced map[string]int
	links     map[[2]string]*link
	store     *simStore
	rules     map[string]ringlimit.Rule
	keys      []string

	admitted      map[string]int64
	leased        int                  // calls decided from leases
	pastLeaver    int                  // forwards to a leaver that did not answer, routed past it
	joinedRecalls int                  // denials that found a grant's recall on its way, and sent none
	denials       map[deniedAt][]int64 // sim µs of every denial by a member incarnation, by key
	stranded      []string             // violations found as the run goes: leases that ended with hits left well after a denial by their grantor (checkStranded), and token-bucket hits one bucket denies (replayAdmit)
	replay        *memstore.Limiter    // one bucket given every token-bucket hit admitted (replayAdmit)
	episodes      map[string]int64
	calls         []*scall
	msgs          int
	parked        map[*scall]func(ringlimit.Decision) // forwarded calls an owner parked on a pull
	parkedMoved   map[*scall]func(to string)
	credited      map[string]bool // key+member+incarnation: an episode counted
	storeDecs     map[string]int  // key: decisions the store made
	loads         map[string]int  // key: loads from the store
	faultTime     int64           // µs, how long the schedule's cuts and pauses lasted, in all
	log           []string        // the last events, printed with a violation
	trace         bool
}

type link struct {
	last     int64 // the last delivery scheduled: FIFO
	conn     int   // bumped by a dropped connection: older messages are lost
	blocked  int64 // until then, nothing gets through
	cutFrom  int64 // the start of the last cut
	cutUntil int64 // the end of the last cut
	dropAt   int64 // the last dropped connection
}

type snode struct {
	name     string
	inc      int
	alive    bool
	joined   bool
	paused   int64      // handles nothing before
	pauses   [][2]int64 // every pause: from, until
	skew     int64      // ms
	core     *Core
	lim      *memstore.Limiter
	vers     map[string]Version
	view     []string
	viewIncs []int               // the incarnations of view's members when it was set
	gossip   []string            // the view gossip gave it, leavers included
	leavers  map[string]int      // members that refused a push as leavers, in that incarnation
	waiting  map[string][]*scall // calls parked on a pull
	faulted  map[string]faulted  // by key: the pulls of one member in a row that a fault timed out
	leases   simLeases           // leases held and lent (lease_test.go)
	served   map[uint64]ringlimit.Decision
	pushes   int // unconfirmed push batches
	pushFail bool
	sentDone uint64 // the view id of the last Done sent
}

// faulted counts the pulls of a key from the member to in a row that timed
// out because of a fault (faultIn).
type faulted struct {
	to string
	n  int
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

// claim is a member's claim on a key it loaded from the store.
type claim struct {
	member string
	inc    uint64
}

type simStore struct {
	claims map[string]claim
	lim    *memstore.Limiter
	vers   map[string]Version
	drop   int // writes refused as older than the stored version
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
		rules: map[string]ringlimit.Rule{}, admitted: map[string]int64{}, episodes: map[string]int64{}, parked: map[*scall]func(ringlimit.Decision){}, parkedMoved: map[*scall]func(string){}, credited: map[string]bool{}, denials: map[deniedAt][]int64{}, storeDecs: map[string]int{}, loads: map[string]int{}, announced: map[string]int{}}
	var zero int64
	s.replay = memstore.New(memstore.Config{MaxKeys: 1024})
	s.store = &simStore{claims: map[string]claim{}, lim: memstore.New(memstore.Config{MaxKeys: 1024, Clock: simClock{s, &zero}}), vers: map[string]Version{}}
	for i := range cfg.keys {
		k := fmt.Sprintf("k%d", i)
		s.keys = append(s.keys, k)
		alg := []ringlimit.Algorithm{ringlimit.FixedWindow, ringlimit.TokenBucket, ringlimit.SlidingWindow, ringlimit.LeakyBucket}[i%4]
		// Windows far longer than a run: the exact limiter admits C in all.
		s.rules[k] = ringlimit.Rule{Algorithm: alg, Limit: int64(3 + s.rng.IntN(5)), Window: 24 * time.Hour}
		if *simRefill && i%4 == 1 && i%8 == 5 {
			s.rules[k] = refillingBucket(s.rules[k].Limit) // (lease_test.go)
		}

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

// viewID is a view's id: its members in their incarnations (a member
// that restarts makes another view, as in node).
func viewID(v View) uint64 {
	var b strings.Builder
	for _, m := range v.Members() {
		fmt.Fprintf(&b, "%s\x00%d\x00", m, incOf(v, m))
	}
	return xxhash.Sum64String(b.String())
}

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
	for _, name := range sortedKeys(s.nodes) {
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
		d := s.rnd(1*ms, s.cfg.mix.gossipMax)
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
	n.gossip = v
	v = s.filterLeavers(n, v)
	// A member that restarted under its name is another member: its view
	// changes (node's view ids include the incarnations), even when the
	// names do not.
	incs := make([]int, len(v))
	for i, m := range v {
		incs[i] = s.nodes[m].inc
	}
	if slices.Equal(n.view, v) && slices.Equal(n.viewIncs, incs) {
		return
	}
	n.view, n.viewIncs = v, incs
	if !slices.Contains(v, name) {
		return
	}
	if len(v) > 1 {
		n.joined = true
	}
	s.logf("%s view %v", name, v)
	was := n.core.Joined()
	nv := s.newRing(v)
	n.core.SetView(nv, s.newRing(without(v, name)), viewID(nv), s.nodeNow(n))
	s.pushAll(n)
	s.scheduleSettle(n, 0)
	if !was && n.core.Joined() {
		for _, key := range sortedKeys(n.waiting) {
			s.again(n, key)
		}
	}
}

// filterLeavers takes out of v the members n knows leave (they refused a
// push as leavers: node does the same), in the incarnation that refused;
// it forgets those v no longer holds.
func (s *sim) filterLeavers(n *snode, v []string) []string {
	if len(n.leavers) == 0 {
		return v
	}
	out := make([]string, 0, len(v))
	for _, m := range v {
		if inc, ok := n.leavers[m]; ok && s.nodes[m].inc == inc {
			continue
		}
		out = append(out, m)
	}
	for m := range n.leavers {
		if !slices.Contains(v, m) {
			delete(n.leavers, m)
		}
	}
	return out
}

// leaves records that the member to refused n's push because it leaves, in
// its incarnation inc: n's view drops it now, before gossip says so.
func (s *sim) leaves(n *snode, to string, inc int) {
	if n.leavers == nil {
		n.leavers = map[string]int{}
	}
	if n.leavers[to] == inc || s.nodes[to].inc != inc {
		return
	}
	n.leavers[to] = inc
	s.logf("%s learns %s leaves", n.name, to)
	s.setView(n.name, n.inc, n.gossip)
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
	t := s.now + s.rnd(50*us, 3*ms)
	if m := s.cfg.mix; m.slowPkt > 0 && s.rng.IntN(m.slowPkt) == 0 {
		t += s.rnd(5*ms, m.slowMax) // a slow packet: the link is FIFO, so the rest wait too
	}
	// (FIFO: not before the last one. A slow packet delays itself by at
	// most slowMax, not the queue behind the last one by as much again:
	// added to the queue's end, slow packets on a busy link piled up into
	// delays of hundreds of ms, past the mix's envelope.)
	t = max(t, l.last+1)
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
//
// The timeout does not count the time the caller itself was paused (node's
// timeouts follow its own scheduling lag, see failover.Lag): it runs that
// much longer, so that an answer that came while the caller was paused is
// read before it gives up.
func (s *sim) rpc(from, to string, timeout int64, req func(reply func(func())), fail func()) {
	fromInc := s.nodes[from].inc
	settled := false
	var expire func(since int64)
	expire = func(since int64) {
		if settled {
			return
		}
		if p := s.pausedIn(s.nodes[from], since, s.now); p > 0 {
			now := s.now
			s.at(s.now+p, func() { expire(now) })
			return
		}
		settled = true
		s.deliver(from, fromInc, fail)
	}
	start := s.now
	s.at(s.now+timeout, func() { expire(start) })
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

// faultIn reports whether a fault kept the member to from answering the
// member from between t0 and t1: it crashed or stopped, it was paused, or a
// link between them was cut or dropped. A request that timed out with none
// of these was only slow.
func (s *sim) faultIn(from, to string, t0, t1 int64) bool {
	t := s.nodes[to]
	if t == nil || !t.alive || s.pausedIn(t, t0, t1) > 0 {
		return true
	}
	for _, l := range []*link{s.link(from, to), s.link(to, from)} {
		if l.cutFrom < t1 && l.cutUntil > t0 || l.dropAt >= t0 && l.dropAt <= t1 && l.dropAt > 0 {
			return true
		}
	}
	return false
}

// pausedIn is how long n was paused between from and to (µs).
func (s *sim) pausedIn(n *snode, from, to int64) int64 {
	var p int64
	for _, ps := range n.pauses {
		if lo, hi := max(ps[0], from), min(ps[1], to); hi > lo {
			p += hi - lo
		}
	}
	return p
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
	n.core.setBugs(s.cfg.bugs)
	n.lim = memstore.New(memstore.Config{MaxKeys: 1024, Clock: simClock{s, &n.skew}, Hash: ring.Hash, TrackChanges: true})
	n.vers = map[string]Version{}
	n.view, n.gossip, n.leavers = nil, nil, nil
	n.waiting = map[string][]*scall{}
	n.faulted = map[string]faulted{}
	n.leases.reset()
	n.leases.nextID = uint64(s.now) * 1000 // as node's: from the start, in ns, so no grant takes an earlier incarnation's id
	n.served = map[uint64]ringlimit.Decision{}
	n.pushes, n.sentDone, n.pushFail = 0, 0, false
	nv := s.newRing([]string{name})
	n.core.SetView(nv, s.newRing(nil), viewID(nv), s.nodeNow(n))
	n.view, n.viewIncs = []string{name}, []int{n.inc}
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
			s.credit(k, name) // what it did not write behind is lost
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

// leave is a graceful leave: push everything, then go; with restart, the
// member starts again under its name once it has stopped (a rolling
// restart).
func (s *sim) leave(name string, restart bool) {
	n := s.nodes[name]
	if !n.alive || n.core.Leaving() || len(s.members) < 2 {
		return
	}
	if n.paused > s.now {
		// A paused process does nothing, Close included.
		s.at(n.paused, func() { s.leave(name, restart) })
		return
	}
	s.logf("%s leaves", name)
	for _, key := range sortedKeys(n.leases.held) { // (node's Close gives its leases back first)
		b := n.leases.held[key]
		delete(n.leases.held, key)
		s.giveBack(n, key, b)
	}
	n.core.Leave(s.newRing(without(n.view, name)))
	s.pushAll(n)
	inc := n.inc
	// It leaves the gossip once its push is confirmed, and every state it
	// gave in a pull's answer too (or after a bound: node's handOffAll),
	// then answers what its peers still send for a while, then stops.
	// (Gone from the gossip, it can no longer be asked: node closes the
	// connections of a member that left. A copy of an answer still on its
	// way would leave with it, while its taker, asking in vain, gave up
	// and started the key from the store: swarm seed 1093.)
	var wait func(int)
	wait = func(tries int) {
		if n.inc != inc || !n.alive {
			return
		}
		if (n.pushes > 0 || s.holding(n)) && tries < 50 {
			if n.pushes == 0 {
				s.pushAll(n) // what came back (a push refused) goes out again
			}
			s.at(s.now+5*ms, func() { s.deliver(name, inc, func() { wait(tries + 1) }) })
			return
		}
		// Its leave reaches the others' views a gossip round or a few
		// later (node's Close: the hand-off, then the leave's broadcast).
		s.members = without(s.members, name)
		s.announced[name] = inc // its intent, straight to every member
		s.at(s.now+s.rnd(0, 250*ms), func() { s.spread(nil) })
		s.at(s.now+s.rnd(0, 450*ms), func() { s.stop(n, inc, restart, 0) })
	}
	wait(0)
}

// holds reports whether n holds a state.
func (s *sim) holds(n *snode) bool {
	for _, k := range s.keys {
		if n.lim.Has(k) {
			return true
		}
	}
	return false
}

// holding reports whether n holds a state, or a copy of one it gave (in a
// push or a pull's answer) that is not confirmed yet.
func (s *sim) holding(n *snode) bool {
	return s.holds(n) || n.core.Unconfirmed() > 0
}

// stop ends a leaver's Close, as node's does: what came back to it since its
// push (a push of its own refused, a pull's answer) is pushed again, and it
// stops once it holds nothing (or after a bound: then what it holds goes to
// the store, and a graceful leave that loses a state shows as a violation).
func (s *sim) stop(n *snode, inc int, restart bool, tries int) {
	if n.inc != inc || !n.alive {
		return
	}
	if s.holding(n) && tries < 50 {
		if n.pushes == 0 {
			s.pushAll(n)
		}
		s.at(s.now+5*ms, func() { s.deliver(n.name, inc, func() { s.stop(n, inc, restart, tries+1) }) })
		return
	}
	for _, k := range s.keys {
		if st, ok := n.lim.Export(k); ok {
			s.storeWrite(k, st, s.next(n.vers[k], s.nodeNow(n)))
		}
	}
	s.logf("%s stops", n.name)
	n.alive = false
	for _, c := range s.calls {
		if c.origin == n.name && c.inc == inc && !c.done {
			c.dropped = true
		}
	}
	if restart {
		name := n.name
		s.at(s.now+s.rnd(1*ms, 100*ms), func() { s.start(name) })
	}
}

// lost reports whether the member to, given up on by from after budget of
// unanswered tries, could not have answered: it crashed or stopped, the
// link between them was cut, or it was paused for at least budget.
func (s *sim) lost(from, to string, budget int64) bool {
	t := s.nodes[to]
	if t == nil || !t.alive {
		return true
	}
	for _, l := range []*link{s.link(from, to), s.link(to, from)} {
		if l.cutUntil > s.now-budget {
			return true
		}
	}
	for _, p := range t.pauses {
		if p[1]-p[0] >= budget && p[1] > s.now-budget-maxWait {
			return true
		}
	}
	return false
}

// credit counts one unreachable-holder episode for key: at most one per
// member incarnation that became unreachable.
// creditSlow counts, under a stress mix, the one episode a key's store
// decisions after forwards that timed out for slowness alone may add.
func (s *sim) creditSlow(key string) {
	if id := key + "\x00slow"; s.cfg.mix.stress && !s.credited[id] {
		s.credited[id] = true
		s.episodes[key]++
	}
}

func (s *sim) credit(key, member string) {
	id := fmt.Sprintf("%s\x00%s\x00%d", key, member, s.nodes[member].inc)
	if !s.credited[id] {
		s.credited[id] = true
		s.episodes[key]++
	}
}
