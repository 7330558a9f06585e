package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/ring"
)

// Leases: hot keys at local speed. A node that forwards one key often (at
// least leaseHot times in a leasePeriod) asks the key's holder for a lease:
// a slice of the key's allowance, which the holder consumes in the key's
// state at once (internal/memstore's Lease says how each algorithm leases,
// and why what a lease admits never goes beyond one limiter). The node then
// decides the key's calls from the lease in its own memory (Source Local)
// until the lease runs out or expires, asks for the next one as it runs
// low, and gives back what it did not use. Its calls never deny from a
// lease: a call the lease cannot cover goes to the holder as before, and
// the holder, before it denies, recalls the leases it gave (their unused
// hits come back), so a key driven to its limit still admits its limit.
// It waits for them only as long as the denied call can wait (recallBy);
// past that the denial stands, and what comes back later is for the calls
// after. One recall of a grant is on its way at a time.
//
// A token bucket leases whether or not it is near its limit: the holder's
// own bucket keeps the tokens out as a floor it does not refill into
// (internal/memstore's floor.go), and every grant that leaves the ledger
// lowers it (releaseGrant).
//
// Bounds: a lease holds at most a hundredth of the key's capacity, and at
// most a quarter of what is left shared among the key's borrowers (so a
// nearly spent key stops leasing and its last hits are decided by its
// holder); it lives leaseTTL at most (a window's, to the window's end).
// What a borrower that dies or is cut off strands is its lease, until the
// lease expires; what a holder that leaves or restarts strands is what its
// leases have left when they end (their give-back finds no grant: a grant
// is known by its id, unique across the holder's incarnations, and by its
// borrower). A holder does not lease a key whose state came to it less
// than leaseTTL ago (a new holder does not know the leases an earlier one
// gave, and they have expired by then), nor while it leaves, and never for
// AllowAll. Reset revokes a key's leases, and so does a call under another
// rule.

const (
	leaseTTL    = time.Second           // a lease's life at most
	leasePeriod = time.Second           // the period demand is counted over
	leaseHot    = 32                    // the default Config.LeaseHot: forwards of one key in a period that make it hot
	leaseRetry  = 20 * time.Millisecond // a hot key's forwards ask again this long after the last ask
	leaseMin    = 4                     // the smallest lease worth its round trip
	leaseShare  = 100                   // a lease holds at most 1/leaseShare of the capacity

	maxBorrowed   = 1024 // leases a node holds at once
	maxLent       = 4096 // keys a node has lent leases of at once
	maxHotKeys    = 4096 // keys whose forwards a period counts
	maxLeaseAsks  = 8    // lease requests on their way at once
	maxKeyGrants  = 64   // outstanding grants of one key
	leaseRecallBy = time.Second
)

// leases is a node's both sides of leasing: the leases it holds of others'
// keys, and those it gave of keys it holds.
type leases struct {
	mu       sync.RWMutex
	held     map[string]*borrowed
	nheld    atomic.Int64 // len(held), for a lock-free miss
	hot      map[string]int32
	lastAsk  map[string]int64 // ms (clock.Mono): when a forward last asked for a lease of the key (this period)
	periodAt int64            // ms (clock.Mono) of the period's start
	asks     int              // requests on their way
	asking   map[string]bool  // the keys they are for: one at a time a key

	lentMu sync.Mutex
	lent   map[string]*ledger
	nlent  atomic.Int64 // len(lent)
	// nextID is the last grant's id. It starts at the node's start instant
	// in nanoseconds, so a restarted node's grants never take the ids of its
	// earlier incarnation's (whose borrowers may still give them back or
	// answer their recall): that would need more grants than nanoseconds
	// between the two starts.
	nextID uint64
	// fresh holds the keys whose state came here from elsewhere (a push, a
	// pull's answer, a load) in the last leaseTTL, and when: they are not
	// leased yet. Past maxFresh it is cleared, and nothing is leased for
	// leaseTTL (freshAll).
	fresh    map[string]int64
	freshAll int64

	// recalled holds the grants recalled before they reached this node
	// (id by granting member, until when they matter): one that arrives
	// after its recall goes back at once.
	recalled map[recallKey]int64

	// wake is closed, and replaced, whenever a grant leaves a ledger here
	// (back, or expired): a recall waits on it for the grants on their way.
	wake chan struct{}
	// recalling holds the grants whose recall is on its way (under
	// lentMu): one at a time a grant, so that denials that come faster
	// than a borrower answers wait for that recall instead of sending
	// more (they would pile up behind a borrower that cannot be reached,
	// each for up to leaseRecallBy). At most one mark a recall message on
	// its way.
	recalling map[uint64]bool

	granted, returned, expired, recalls, decided atomic.Uint64
	dropped                                      atomic.Uint64 // give-backs that found no grant, or a state not theirs
	recallsSent                                  atomic.Uint64 // recall and revoke messages (tests)
	asked, declined                              atomic.Uint64
	// clock tells the time (see leaseClock); set before the node starts.
	clock leaseClock
	// declines counts, by key, the asks declined in a row (under mu): a
	// key whose holder keeps declining (one nearly spent, or too small to
	// lease, or just arrived there) asks after twice the wait each time,
	// up to maxAskWait, instead of every leaseRetry. At most maxHotKeys
	// keys; past it, the counts start again.
	declines map[string]uint8
}

// leaseClock is what the leases read the time from. Every lifetime,
// period and wait of theirs is on Mono: ms since the node started, on the
// monotonic clock. (They were read from the wall clock, so a borrower
// whose clock stepped back kept its lease longer, and a holder whose clock
// stepped forward forgot its grants early.) Wall is read once, for the
// grant ids, which must differ across the node's incarnations.
type leaseClock interface {
	Wall() time.Time
	Mono() int64
}

// sysLeaseClock is the system's: Mono is time.Since(start).
type sysLeaseClock struct{ start time.Time }

func (c sysLeaseClock) Wall() time.Time { return time.Now() }
func (c sysLeaseClock) Mono() int64     { return int64(time.Since(c.start) / time.Millisecond) }

type recallKey struct {
	from string
	id   uint64
}

// maxRecalled bounds the recalled grants remembered.
const maxRecalled = 4096

// borrowed is a lease this node holds.
type borrowed struct {
	rule  ringlimit.Rule
	left  atomic.Int64
	size  int64
	at    int64  // ms (leases.clock.Mono): when it was asked for
	got   int64  // ms (leases.clock.Mono): when it came (its pace counts from then)
	until int64  // ms (leases.clock.Mono): after it the lease is void
	from  string // the member that granted it
	id    uint64 // its id there
	asked atomic.Bool
}

// ledger is what a holder lent of one key.
type ledger struct {
	rule   ringlimit.Rule
	grants map[uint64]grant
	// reset is set when the key's state was reset here (resetHeld), in
	// the same step: its grants were taken from the state before, so
	// nothing they give back goes into the state now, and no lease is
	// granted until their revoke (recallLeases) forgets them.
	reset bool
}

type grant struct {
	to    string
	n     int64
	lease memstore.Grant // what the state gave (memstore.Return's)
	until int64          // ms (leases.clock.Mono), with a margin past the borrower's
}

// mayReturn reports whether what is left of g may still come back at now:
// until the ledger forgets it, leaseTTL after it expired. Its borrower no
// longer decides from it, but gives back what it had left only when its
// sweep runs, which on a descheduled node can come after the grant
// expired here; meanwhile a recall gets it at once.
func (g grant) mayReturn(now int64) bool { return now < g.until+leaseTTL.Milliseconds() }

func (ls *leases) init() {
	ls.held = map[string]*borrowed{}
	ls.hot = map[string]int32{}
	ls.lastAsk = map[string]int64{}
	ls.declines = map[string]uint8{}
	ls.asking = map[string]bool{}
	ls.lent = map[string]*ledger{}
	ls.fresh = map[string]int64{}
	ls.recalled = map[recallKey]int64{}
	ls.recalling = map[uint64]bool{}
	ls.wake = make(chan struct{})
	if ls.clock == nil {
		ls.clock = sysLeaseClock{start: time.Now()}
	}
	start := ls.clock.Wall()
	// A new node leases at once. (It waited leaseTTL, since an earlier one
	// under its name may have leased: when grant ids restarted from 1, a
	// late give-back of the earlier one's could take a new grant's place.
	// Ids are unique across incarnations now (nextID), an earlier one's
	// leases were taken from states that either come here again, marked
	// fresh (arrived), or were lost with it, and a key made hot as a
	// cluster formed waited seconds for a lease.)
	ls.freshAll = ls.clock.Mono() - leaseTTL.Milliseconds()
	ls.nextID = uint64(start.UnixNano())
}

// maxFresh bounds the keys arrived remembers.
const maxFresh = 1 << 16

// arrived records that key's state came here from another member or the
// store: it is not leased for leaseTTL.
func (ls *leases) arrived(key string) {
	now := ls.clock.Mono()
	ls.lentMu.Lock()
	defer ls.lentMu.Unlock()
	if len(ls.fresh) >= maxFresh {
		for k, at := range ls.fresh {
			if now-at >= leaseTTL.Milliseconds() {
				delete(ls.fresh, k)
			}
		}
		if len(ls.fresh) >= maxFresh {
			clear(ls.fresh)
			ls.freshAll = now
			return
		}
	}
	ls.fresh[key] = now
}

// settled reports whether key may be leased: its state did not come here
// in the last leaseTTL. Under lentMu.
func (ls *leases) settled(key string, now int64) bool {
	ttl := leaseTTL.Milliseconds()
	if now-ls.freshAll < ttl {
		return false
	}
	at, ok := ls.fresh[key]
	if ok && now-at >= ttl {
		delete(ls.fresh, key)
	}
	return !ok || now-at >= ttl
}

// take decides a call from a lease, if this node holds one of key under
// rule that covers hits now. It never denies: false sends the call on.
func (n *Node) fromLease(key string, rule ringlimit.Rule, hits int64) (ringlimit.Decision, bool) {
	ls := &n.leases
	if ls.nheld.Load() == 0 || hits <= 0 {
		return ringlimit.Decision{}, false
	}
	ls.mu.RLock()
	b := ls.held[key]
	ls.mu.RUnlock()
	now := ls.clock.Mono()
	if b == nil || b.rule != rule || now >= b.until {
		return ringlimit.Decision{}, false
	}
	for {
		left := b.left.Load()
		if left < hits {
			return ringlimit.Decision{}, false
		}
		if b.left.CompareAndSwap(left, left-hits) {
			ls.decided.Add(1)
			// The next one, before this runs out or ends: sized by how fast
			// this one goes.
			if !b.asked.Load() && (left-hits < b.size/4 || now >= b.until-leaseTTL.Milliseconds()/4) &&
				n.askLease(key, rule, b.next(now, left-hits)) {
				b.asked.Store(true)
			}
			return ringlimit.Decision{Allowed: true, Limit: rule.Limit, Remaining: left - hits, Source: ringlimit.Local}, true
		}
	}
}

// next is the size to ask for after b, at now with left hits: what b's
// pace spends over a lease's life, and half again. The pace counts from
// when b came, not from its ask: counted with the ask's round trip, a
// lease spent at once asked for little more each time, and on a busy host
// (round trips of 100 ms) a hot key took a dozen leases to reach its pace.
func (b *borrowed) next(now, left int64) int64 {
	used, took := b.size-left, max(1, now-max(b.at, b.got))
	return max(leaseMin, used*leaseTTL.Milliseconds()/took*3/2)
}

// sawForward counts a forwarded call of key toward its demand, and asks for
// a lease once the key is hot.
func (n *Node) sawForward(key string, rule ringlimit.Rule, hits int64) {
	if hits <= 0 || n.cfg.LeaseHot < 0 || rule.Algorithm == ringlimit.LeakyBucket || rule.Algorithm == ringlimit.SlidingLog {
		return // (those never lease: internal/memstore's Lease)
	}
	ls := &n.leases
	now := ls.clock.Mono()
	ls.mu.Lock()
	if now-ls.periodAt >= leasePeriod.Milliseconds() {
		clear(ls.hot)
		clear(ls.lastAsk)
		ls.periodAt = now
	}
	periodAt := ls.periodAt
	c, ok := ls.hot[key]
	if !ok && len(ls.hot) >= maxHotKeys {
		ls.mu.Unlock()
		return
	}
	c++
	ls.hot[key] = c
	b := ls.held[key]
	// Once hot, a key's forwards ask again a moment after an ask that
	// brought nothing (declined, or lost).
	if hot := int32(n.cfg.LeaseHot); hot < 0 || c < hot || now-ls.lastAsk[key] < askWait(ls.declines[key]) {
		ls.mu.Unlock()
		return
	}
	ls.lastAsk[key] = now
	ls.mu.Unlock()
	// The demand: the forwards so far this period over a lease's life, or
	// their pace since the period began, whichever is more (a key that
	// became hot moments ago forwards far more than c a second), and half
	// again.
	want := max(leaseMin, int64(c)*int64(leaseTTL)/int64(leasePeriod)*2,
		int64(c)*leaseTTL.Milliseconds()/max(1, now-periodAt)*3/2)
	if b != nil && b.rule == rule {
		if now < b.until && b.left.Load() >= hits {
			return // (a call the lease did not cover raced its grant)
		}
		want = max(want, b.next(now, b.left.Load())) // it ran out or ended: the demand is at least its pace
	}
	n.askLease(key, rule, want)
}

// askWait is how long after its last ask a hot key asks again, in ms,
// once its holder declined that many asks in a row: leaseRetry, doubled
// for each, at most maxAskWait.
func askWait(declined uint8) int64 {
	return min(leaseRetry.Milliseconds()<<min(declined, 8), maxAskWait.Milliseconds())
}

// maxAskWait is the longest a hot key's forwards wait to ask again after
// declines: a key whose state just came to its holder is leased a
// leaseTTL later, and its borrowers then wait at most this much more. (It
// was leasePeriod, when a token bucket far under its limit declined every
// ask; at 250 ms a key declined for good costs a borrower 4 asks a second,
// beside at least LeaseHot forwards.)
const maxAskWait = 250 * time.Millisecond

// askLease asks the key's holder for a lease of about want hits, in the
// background (at most maxLeaseAsks at once, one a key); false if it did not.
func (n *Node) askLease(key string, rule ringlimit.Rule, want int64) bool {
	ls := &n.leases
	ls.mu.Lock()
	if ls.asks >= maxLeaseAsks || ls.asking[key] {
		ls.mu.Unlock()
		return false
	}
	ls.asks++
	ls.asking[key] = true
	ls.mu.Unlock()
	n.bgMu.Lock()
	if n.bgOff {
		n.bgMu.Unlock()
		ls.mu.Lock()
		ls.asks--
		delete(ls.asking, key)
		ls.mu.Unlock()
		return false
	}
	n.bg.Add(1)
	n.bgMu.Unlock()
	go func() {
		defer n.bg.Done()
		defer func() {
			ls.mu.Lock()
			ls.asks--
			delete(ls.asking, key)
			ls.mu.Unlock()
		}()
		n.requestLease(key, rule, want)
	}()
	return true
}

// requestLease asks the key's owner for a lease and installs what it
// grants (giving back what the lease it replaces has left).
func (n *Node) requestLease(key string, rule ringlimit.Rule, want int64) {
	to := n.own.view.Load().OwnerOfHash(ring.Hash(key))
	if to == "" || to == n.name {
		return
	}
	pc := n.peers.get(to)
	if pc == nil {
		return
	}
	ls := &n.leases
	m := &leaseMsg{kind: leaseAsk, from: n.name, key: key, rule: rule, n: want}
	ls.mu.RLock()
	if b := ls.held[key]; b != nil && b.from == to {
		m.id, m.left = b.id, b.left.Load() // (it only goes down: the holder counts at most this)
	}
	ls.mu.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ForwardTimeout)
	defer cancel()
	sent := ls.clock.Mono()
	ls.asked.Add(1)
	res, err := pc.client.Do(ctx, leaseRequest(m))
	if err != nil || res.Err != nil {
		return
	}
	a, err := parseLeaseAnswer(res.State)
	if err != nil {
		n.warn.Warn("bad lease answer", "node: bad answer to a lease request", "node", n.name, "from", to, "err", err)
		return
	}
	ls.mu.Lock()
	if a.n <= 0 {
		if len(ls.declines) >= maxHotKeys {
			clear(ls.declines)
		}
		ls.declines[key] = min(ls.declines[key], 254) + 1
	} else {
		delete(ls.declines, key)
	}
	ls.mu.Unlock()
	if a.n <= 0 {
		ls.declined.Add(1)
		return
	}
	b := &borrowed{rule: rule, size: a.n, at: sent, got: ls.clock.Mono(), until: sent + a.life.Milliseconds(), from: to, id: a.id}
	b.left.Store(a.n)
	ls.mu.Lock()
	if _, gone := ls.recalled[recallKey{to, a.id}]; gone {
		delete(ls.recalled, recallKey{to, a.id})
		ls.mu.Unlock()
		n.giveBack(key, b) // recalled on its way here
		return
	}
	old := ls.held[key]
	if old == nil && len(ls.held) >= maxBorrowed {
		ls.mu.Unlock()
		n.giveBack(key, b) // no room: it goes back at once
		return
	}
	ls.held[key] = b
	ls.nheld.Store(int64(len(ls.held)))
	ls.mu.Unlock()
	if old != nil {
		n.giveBack(key, old)
	}
}

// giveBack returns what the lease b has left to the member that granted
// it, and voids it (best effort: what does not come back is stranded until
// the lease expires there).
func (n *Node) giveBack(key string, b *borrowed) {
	left := b.left.Swap(0)
	pc := n.peers.get(b.from)
	if pc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ForwardTimeout)
	defer cancel()
	_, _ = pc.client.Do(ctx, leaseRequest(&leaseMsg{kind: leaseBack, from: n.name, key: key, rule: b.rule, n: left, id: b.id}))
}

// sweepLeases drops the leases that expired and gives back what they had
// left, and forgets the grants whose leases expired. It runs on the node's
// ticker.
func (n *Node) sweepLeases() {
	ls := &n.leases
	now := ls.clock.Mono()
	var gone []*borrowed
	var keys []string
	ls.mu.Lock()
	for k, b := range ls.held {
		if now >= b.until {
			delete(ls.held, k)
			// Given back even when spent: the holder then forgets the
			// grant at once, and a recall there waits for none that will
			// never come back.
			gone, keys = append(gone, b), append(keys, k)
			ls.expired.Add(1)
		}
	}
	ls.nheld.Store(int64(len(ls.held)))
	ls.mu.Unlock()
	for i, b := range gone {
		n.giveBack(keys[i], b)
	}
	ls.lentMu.Lock()
	for k, l := range ls.lent {
		for id, g := range l.grants {
			// An expired grant is no longer out, but what its borrower
			// gives back is taken for a while yet (the borrower's sweep
			// runs after its own expiry).
			if now >= g.until+leaseTTL.Milliseconds() {
				delete(l.grants, id)
				ls.woke()
				n.releaseGrant(k, l, g)
			}
		}
		if len(l.grants) == 0 {
			delete(ls.lent, k)
		}
	}
	ls.nlent.Store(int64(len(ls.lent)))
	ls.lentMu.Unlock()
}

// outstanding is the hits of key lent under rule and not yet back or
// expired, and how many members hold them; other tells whether some were
// lent under another rule.
func (ls *leases) outstanding(key string, rule ringlimit.Rule) (n int64, borrowers int, other bool) {
	now := ls.clock.Mono()
	ls.lentMu.Lock()
	defer ls.lentMu.Unlock()
	l := ls.lent[key]
	if l == nil {
		return 0, 0, false
	}
	for _, g := range l.grants {
		if now < g.until {
			n += g.n
			borrowers++
		}
	}
	return n, borrowers, l.rule != rule && n > 0 || l.reset
}

// mayReturn reports whether some grant of key under rule may still give
// hits back (see grant.mayReturn): expired ones included.
func (ls *leases) mayReturn(key string, rule ringlimit.Rule) bool {
	now := ls.clock.Mono()
	ls.lentMu.Lock()
	defer ls.lentMu.Unlock()
	l := ls.lent[key]
	if l == nil || l.rule != rule {
		return false
	}
	for _, g := range l.grants {
		if g.mayReturn(now) {
			return true
		}
	}
	return false
}

// heldBy is the hits of key that member to holds in unexpired grants from
// this node, counting the grant id at most left.
func (ls *leases) heldBy(key, to string, id uint64, left int64) int64 {
	now := ls.clock.Mono()
	ls.lentMu.Lock()
	defer ls.lentMu.Unlock()
	var n int64
	if l := ls.lent[key]; l != nil {
		for gid, g := range l.grants {
			if g.to != to || now >= g.until {
				continue
			}
			if gid == id {
				n += min(g.n, left)
			} else {
				n += g.n
			}
		}
	}
	return n
}

// grantLease answers a lease request: the key's holder takes the hits from
// the key's state and records the grant. It grants only while nothing here
// changes hands, for a key whose state is here (or which this node owns and
// may start), and sizes the lease from the demand and from what is left.
func (n *Node) grantLease(m *leaseMsg) leaseAnswer {
	o := &n.own
	h := ring.Hash(m.key)
	ls := &n.leases
	if n.closed.Load() {
		return leaseAnswer{}
	}
	_, borrowers, other := ls.outstanding(m.key, m.rule)
	if other {
		return leaseAnswer{} // leases under another rule are out: they are revoked first (see afterDecision)
	}
	ls.lentMu.Lock()
	settled := ls.settled(m.key, ls.clock.Mono())
	ls.lentMu.Unlock()
	if !settled {
		return leaseAnswer{}
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.core.Leaving() || o.core.Owner(h) != n.name {
		return leaseAnswer{}
	}
	if !n.local.Has(m.key) {
		if to, ok := o.core.Peek(m.key, h); !ok || to != "" || !o.fresh() {
			return leaseAnswer{}
		}
	}
	now := n.now()
	d, err := n.local.AllowNAt(now, m.key, m.rule, 0)
	if err != nil {
		return leaseAnswer{}
	}
	// What this borrower holds already counts against its hundredth (its
	// current lease at what it says is left): a borrower that dies strands
	// at most that.
	size := min(m.n, m.rule.Capacity()/leaseShare-ls.heldBy(m.key, m.from, m.id, m.left), d.Remaining/int64(4*(borrowers+1)))
	if size < leaseMin {
		return leaseAnswer{} // a nearly spent key: its last hits are decided here
	}
	lease, err := n.local.Lease(now, m.key, m.rule, size, leaseTTL)
	got, life := lease.N, lease.Life
	if err != nil || got <= 0 {
		return leaseAnswer{}
	}
	ls.lentMu.Lock()
	defer ls.lentMu.Unlock()
	l := ls.lent[m.key]
	if l == nil {
		if len(ls.lent) >= maxLent {
			n.local.Return(now, m.key, m.rule, lease, got) // no room to remember it: not lent
			return leaseAnswer{}
		}
		l = &ledger{rule: m.rule, grants: map[uint64]grant{}}
		ls.lent[m.key] = l
		ls.nlent.Store(int64(len(ls.lent)))
	}
	if len(l.grants) >= maxKeyGrants {
		n.local.Return(now, m.key, m.rule, lease, got)
		return leaseAnswer{}
	}
	if l.rule != m.rule && len(l.grants) > 0 {
		// Every grant under the old rule has expired (outstanding said so):
		// what they had left must not come back into this rule's state
		// (a token bucket's floor they raised falls).
		for _, g := range l.grants {
			n.releaseGrant(m.key, l, g)
		}
		clear(l.grants)
		ls.woke()
	}
	l.rule = m.rule
	ls.nextID++
	id := ls.nextID
	// The grant outlives the borrower's lease by a margin: the borrower
	// counts the life from before it asked.
	l.grants[id] = grant{to: m.from, n: got, lease: lease, until: ls.clock.Mono() + (life + leaseTTL/5).Milliseconds()}
	ls.granted.Add(1)
	return leaseAnswer{n: got, life: life, id: id}
}

// takeBack records a lease's unused hits coming back (given back by its
// borrower, or answered to a recall) and returns them to the key's state,
// if it is still the state they were taken from. One that finds no grant,
// a key reset since (resetHeld), another rule, or no state here gives
// nothing back, and is counted (LeaseStats.Dropped).
//
// The grant is looked up and the hits returned in one step under lentMu,
// which resetHeld holds while it resets the key: a give-back comes either
// before the Reset (which then forgets it with the state) or after (and
// finds the ledger reset). Before, it let go of lentMu in between, and one
// served between a Reset and the revoke of the key's leases went into the
// new state (1,010 of 1,000).
func (n *Node) takeBack(from, key string, rule ringlimit.Rule, id uint64, left int64) bool {
	ls := &n.leases
	o := &n.own
	o.mu.RLock() // (before lentMu, as grantLease takes them)
	defer o.mu.RUnlock()
	ls.lentMu.Lock()
	defer ls.lentMu.Unlock()
	l := ls.lent[key]
	var g grant
	ok := false
	if l != nil {
		// (A grant made to another member is not this one's to give back.)
		if g, ok = l.grants[id]; ok && g.to == from {
			delete(l.grants, id)
			ls.woke()
		} else {
			ok = false
		}
		if len(l.grants) == 0 {
			delete(ls.lent, key)
			ls.nlent.Store(int64(len(ls.lent)))
		}
	}
	if !ok || l.reset || rule != l.rule || !n.local.Has(key) {
		if ok {
			n.releaseGrant(key, l, g) // (a token bucket's floor falls all the same)
		}
		if left > 0 || !ok {
			ls.dropped.Add(1)
		}
		return false
	}
	// What it did not use comes back, and a token bucket's floor falls by
	// the whole grant (memstore's Return), used up or not.
	n.local.Return(n.now(), key, rule, g.lease, min(left, g.n))
	if left <= 0 {
		return false
	}
	ls.returned.Add(1)
	return true
}

// releaseGrant lets go of grant g of key from ledger l, which leaves the
// ledger with nothing given back (expired, revoked, or given back where
// its hits may not come back): a token bucket's floor falls by it
// (internal/memstore's floor; a release after the state left or was reset,
// or after the floor ended, does nothing there). Under lentMu.
func (n *Node) releaseGrant(key string, l *ledger, g grant) {
	if l.rule.Algorithm == ringlimit.TokenBucket && !l.reset {
		n.local.Return(n.now(), key, l.rule, g.lease, 0)
	}
}

// resetHeld resets key's state, which this node holds (under the core's
// lock), and marks the leases it gave of the key as taken from the state
// before, in one step: see takeBack. Their revoke follows
// (recallLeases).
func (n *Node) resetHeld(ctx context.Context, key string) error {
	ls := &n.leases
	ls.lentMu.Lock()
	defer ls.lentMu.Unlock()
	if l := ls.lent[key]; l != nil {
		l.reset = true
	}
	return n.local.Reset(ctx, key)
}

// recallLeases asks every member holding a lease of key to give it up, and
// returns what they had left to the key's state; it reports whether any
// came back. revoke voids them without giving anything back (the key was
// reset: its state is not the one they were taken from).
//
// It waits for the answers, and for the grants still out, until by at the
// latest, or until ctx ends: its caller is a call that waits on it (see
// recallBy). What comes back later comes back all the same, for the calls
// after: the recall's messages run on the node's background goroutines.
func (n *Node) recallLeases(ctx context.Context, key string, revoke bool, by time.Time) bool {
	ls := &n.leases
	if ls.nlent.Load() == 0 {
		return false
	}
	ls.lentMu.Lock()
	l := ls.lent[key]
	var gs []grant
	var ids []uint64
	var joined []bool // a grant whose recall another call sent: waited for, not asked again
	var rule ringlimit.Rule
	if l != nil {
		now := ls.clock.Mono()
		rule = l.rule
		for id, g := range l.grants {
			if g.mayReturn(now) {
				gs, ids = append(gs, g), append(ids, id)
				joined = append(joined, !revoke && ls.recalling[id])
				if !revoke {
					ls.recalling[id] = true
				}
			}
		}
		if revoke {
			delete(ls.lent, key)
			ls.nlent.Store(int64(len(ls.lent)))
		}
	}
	ls.lentMu.Unlock()
	if len(gs) == 0 {
		return false
	}
	ls.recalls.Add(1)
	kind := leaseRecall
	if revoke {
		kind = leaseRevoke
	}
	// What is still out after the recall comes back when it arrives, or
	// expires: the wait below is for it, until its till (ms, clock.Mono). A
	// grant with a borrower that did not answer is waited for until it
	// expires; one whose borrower answered that it does not hold it (the
	// lease is on its way there, or given back on its way here) until it
	// may no longer come back (grant.mayReturn).
	type answer struct {
		i    int
		till int64
	}
	answers := make(chan answer, len(gs)) // (buffered: a sender never waits for a caller that stopped waiting)
	var back atomic.Bool
	waitTill := make([]int64, len(gs)) // 0: not waited for (no answer yet)
	sent := 0
	for i, g := range gs {
		if joined[i] {
			waitTill[i] = g.until // (as if its borrower did not answer: until it leaves the ledger or expires)
			continue
		}
		if !n.inBackground(func() {
			till := g.until
			defer func() {
				if !revoke {
					ls.lentMu.Lock()
					delete(ls.recalling, ids[i])
					ls.lentMu.Unlock()
				}
				answers <- answer{i, till}
			}()
			pc := n.peers.get(g.to)
			if pc == nil {
				return
			}
			rctx, cancel := context.WithTimeout(context.Background(), min(pc.client.timeout(), leaseRecallBy))
			defer cancel()
			ls.recallsSent.Add(1)
			res, err := pc.client.Do(rctx, leaseRequest(&leaseMsg{kind: kind, from: n.name, key: key, rule: rule, id: ids[i]}))
			if err != nil || res.Err != nil {
				return
			}
			if revoke {
				// Its borrower voided it: a token bucket's floor falls (a
				// revoke that does not arrive leaves it to lapse with the
				// lease).
				ls.lentMu.Lock()
				n.releaseGrant(key, l, g)
				ls.lentMu.Unlock()
				return
			}
			a, err := parseLeaseAnswer(res.State)
			if err != nil {
				return // an answer of the release before
			}
			if a.id != ids[i] {
				till = g.until + leaseTTL.Milliseconds() // not there (it comes back as it arrives)
				return
			}
			if n.takeBack(g.to, key, rule, ids[i], a.n) {
				back.Store(true)
			}
		}) {
			if !revoke {
				ls.lentMu.Lock()
				for j := i; j < len(gs); j++ {
					if !joined[j] {
						delete(ls.recalling, ids[j])
					}
				}
				ls.lentMu.Unlock()
			}
			break // closing: the grants still out are not waited for
		}
		sent++
	}
	wait := time.NewTimer(time.Until(by))
	defer wait.Stop()
	for got := 0; got < sent; got++ {
		select {
		case a := <-answers:
			waitTill[a.i] = a.till
			if back.Load() && !revoke {
				return true // some came back: decide again (the rest come back for the calls after)
			}
			continue
		case <-wait.C:
		case <-ctx.Done():
		case <-n.stop:
		}
		return back.Load() // out of time: the denial stands unless some came back
	}
	if revoke {
		return false
	}
	var left bool // a grant recalled is still in the ledger
	for {
		ls.lentMu.Lock()
		left = false
		now := ls.clock.Mono()
		var till int64 // the last instant a grant still out is waited for
		if l := ls.lent[key]; l != nil {
			for i, id := range ids {
				if _, ok := l.grants[id]; ok {
					left = true
					if now < waitTill[i] {
						till = max(till, waitTill[i])
					}
				}
			}
		}
		wake := ls.wake
		ls.lentMu.Unlock()
		if till == 0 {
			break
		}
		end := time.Now().Add(time.Duration(till-ls.clock.Mono()) * time.Millisecond)
		if by.Before(end) {
			end = by // (what is out is waited for until then)
		}
		t := time.NewTimer(time.Until(end))
		stopped := false
		select {
		case <-wake:
			back.Store(true)
		case <-t.C:
		case <-ctx.Done():
			stopped = true
		case <-n.stop:
			stopped = true
		}
		t.Stop()
		if stopped || !time.Now().Before(by) {
			return back.Load() // out of time: the denial stands unless some came back
		}
	}
	// Some came back, or every grant recalled left the ledger (given back
	// on a message of its own, say to a recall answer this node gave up
	// waiting for): decide again. At worst it is denied again, with nothing
	// left to recall.
	return back.Load() || !left
}

// recallBy is when a call that waits on a recall of the leases it would
// otherwise be denied for stops waiting, its denial standing, given when
// start was: a forwarded call a third of the forward timeout after its
// worker took it up (its caller waits for the answer half the forward
// timeout at least, and would then send the call to the store tier, which
// may admit it: in CI a key admitted 50,012 of 50,000 that way); a call
// made here twice the forward timeout after its denial, as for a pull
// (parkTimeout). A forwarded call served on a connection's reader never
// waits (see ownerHandler.Serve).
func (n *Node) recallBy(start time.Time, fwd bool) time.Time {
	return start.Add(n.parkTimeout(fwd))
}

// woke is called under lentMu when a grant leaves a ledger.
func (ls *leases) woke() {
	close(ls.wake)
	ls.wake = make(chan struct{})
}

// surrender is a borrower's side of a recall or a revoke: the lease of key
// granted as id by from is void, and what it had left is answered (held:
// this node holds it). One this node does not hold yet is remembered, and
// goes back the moment it arrives.
func (n *Node) surrender(from, key string, id uint64) (left int64, held bool) {
	ls := &n.leases
	ls.mu.Lock()
	b := ls.held[key]
	if b == nil || b.from != from || b.id != id {
		now := ls.clock.Mono()
		if len(ls.recalled) >= maxRecalled {
			for k, until := range ls.recalled {
				if now >= until {
					delete(ls.recalled, k)
				}
			}
		}
		if len(ls.recalled) < maxRecalled {
			ls.recalled[recallKey{from, id}] = now + 2*leaseTTL.Milliseconds()
		}
		ls.mu.Unlock()
		return 0, false
	}
	delete(ls.held, key)
	ls.nheld.Store(int64(len(ls.held)))
	ls.mu.Unlock()
	return b.left.Swap(0), true
}

// dropLease voids this node's own lease of key, if it holds one (a Reset
// of the key here).
func (n *Node) dropLease(key string) {
	ls := &n.leases
	if ls.nheld.Load() == 0 {
		return
	}
	ls.mu.Lock()
	b := ls.held[key]
	delete(ls.held, key)
	ls.nheld.Store(int64(len(ls.held)))
	ls.mu.Unlock()
	if b != nil {
		b.left.Store(0)
	}
}

// afterDecision is the holder's step after it decided a call on key itself:
// a denial while leases of the key are out recalls them and reports that
// the call should be decided again; a call under another rule than the
// leases' revokes them.
func (n *Node) afterDecision(ctx context.Context, key string, rule ringlimit.Rule, d ringlimit.Decision, by time.Time) (again bool) {
	return n.mustRecall(ctx, key, rule, d, by) && n.recallLeases(ctx, key, false, by)
}

// mustRecall reports whether the call's denial, d, is to recall key's
// leases (some under rule may still come back); it revokes them if leases
// under another rule are out (waiting until by for that).
func (n *Node) mustRecall(ctx context.Context, key string, rule ringlimit.Rule, d ringlimit.Decision, by time.Time) bool {
	if n.leases.nlent.Load() == 0 {
		return false
	}
	if _, _, other := n.leases.outstanding(key, rule); other {
		n.recallLeases(ctx, key, true, by)
		return false
	}
	return !d.Allowed && n.leases.mayReturn(key, rule)
}

// recallSoon is afterDecision for a call that must not wait (one served
// on a connection's reader): the recall goes on its way, and it reports
// whether the call should be asked again (the leases' hits may come back;
// the caller's next ask waits for them, on a worker).
func (n *Node) recallSoon(key string, rule ringlimit.Rule, d ringlimit.Decision) (askAgain bool) {
	bg := context.Background()
	if !n.mustRecall(bg, key, rule, d, time.Time{}) {
		return false
	}
	n.recallLeases(bg, key, false, time.Time{})
	return true
}

// serveLease serves a lease message from a peer.
func (n *Node) serveLease(items []peer.Item) peer.Result {
	m, err := parseLease(items)
	if err != nil {
		n.stats.badHold.Add(1)
		n.warn.Warn("bad lease message", "node: bad lease message", "node", n.name, "err", err)
		return peer.Result{Err: err}
	}
	switch m.kind {
	case leaseAsk:
		return peer.Result{State: appendLeaseAnswer(nil, n.grantLease(&m))}
	case leaseBack:
		n.takeBack(m.from, m.key, m.rule, m.id, m.n)
		return peer.Result{}
	case leaseRecall, leaseRevoke:
		left, held := n.surrender(m.from, m.key, m.id)
		a := leaseAnswer{n: left}
		if held {
			a.id = m.id // (0: not here yet; it goes back when it comes)
			if m.kind == leaseRecall && left > 0 {
				// The answer carries what was left, but a recall that
				// timed out at the holder never reads it: said again on a
				// message of its own, the hits are not lost. The holder
				// takes a grant back once (by its id), whichever comes
				// first.
				b := &borrowed{rule: m.rule, from: m.from, id: m.id}
				b.left.Store(left)
				n.inBackground(func() { n.giveBack(m.key, b) })
			}
			if h := n.recallAnswered; h != nil {
				h(left) // tests: an answer that is late
			}
		}
		return peer.Result{State: appendLeaseAnswer(nil, a)}
	}
	return peer.Result{}
}

// inBackground runs f on a goroutine of the node's, unless the node is
// closing; false if it did not.
func (n *Node) inBackground(f func()) bool {
	n.bgMu.Lock()
	defer n.bgMu.Unlock()
	if n.bgOff {
		return false
	}
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		f()
	}()
	return true
}

// returnLeases gives back every lease this node holds (Close).
func (n *Node) returnLeases() {
	ls := &n.leases
	ls.mu.Lock()
	held := ls.held
	ls.held = map[string]*borrowed{}
	ls.nheld.Store(0)
	ls.mu.Unlock()
	for k, b := range held {
		if b.left.Load() > 0 && ls.clock.Mono() < b.until {
			n.giveBack(k, b)
		}
	}
}

// LeaseStats are a node's lease counters (see the package docs, Leases).
type LeaseStats struct {
	Held int // leases this node holds now, of keys other members hold
	Lent int // keys this node has lent leases of, not expired or back
	// Granted counts the leases this node gave; Returned those whose unused
	// hits came back (given back, or answered to a recall); Dropped the
	// give-backs that gave nothing back: their grant was not known here
	// (revoked, expired out of the ledger, or of an earlier incarnation),
	// or the key was reset since, its rule changed, or its state left;
	// Recalls the
	// times a denial recalled a key's leases first; Expired the leases this
	// node held that ran out of time; Decisions the calls decided here from
	// a lease.
	Granted, Returned, Recalls, Expired, Decisions uint64
	Dropped                                        uint64
	// Asked counts the leases this node asked for of others' keys; Declined
	// those the holder declined (a key nearly spent, or too small to
	// lease, or just arrived there). A key declined in a row asks less
	// and less often, down to once every 250 ms. A leaky bucket or a
	// sliding log is never asked for (they do not lease).
	Asked, Declined uint64
}

func (n *Node) leaseStats() LeaseStats {
	ls := &n.leases
	return LeaseStats{Held: int(ls.nheld.Load()), Lent: int(ls.nlent.Load()), Granted: ls.granted.Load(),
		Returned: ls.returned.Load(), Recalls: ls.recalls.Load(), Expired: ls.expired.Load(), Decisions: ls.decided.Load(),
		Asked: ls.asked.Load(), Declined: ls.declined.Load(), Dropped: ls.dropped.Load()}
}
