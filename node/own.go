package node

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/hold"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/remote"
	"github.com/ringlimit/ringlimit/ring"
)

// owner is the shell's hold on the ownership core (internal/hold): the core
// itself, the lock that serialises its events, and what the shell keeps
// beside it.
//
// Every event of the core runs between begin and end, under one lock,
// together with the local store's hand-over steps it calls for (Take,
// Import, and a decision on a key whose state may not be here). The owned
// fast path does not take the lock: it decides a key whose state is here
// under the local store's own lock, and starts a key afresh only while
// fresh reports true, which it asks under that same lock. begin makes fresh
// false before an event looks at the local store, and end makes it true
// again only if the core is quiet (no key changes hands), so no fast
// decision starts a key an event is giving away or has given away.
type owner struct {
	mu     sync.RWMutex // events: Lock; Peek and the decisions it allows: RLock
	core   *hold.Core
	quiet  atomic.Bool  // the core is quiet and joined (set by end)
	moving atomic.Int64 // events between begin and end

	view    atomic.Pointer[ring.Ring] // the core's view, for the fast path
	gen     atomic.Uint64             // bumped under begin with each view stored, and the leave; read before view (freshSince)
	cur     view                      // the core's view, with incarnations (under the lock)
	gossip  view                      // the membership's last ring (under the lock)
	leavers map[string]uint64         // members that refused a push as leavers, in that incarnation (see leaves)

	// waits are the calls parked on a key while its state is pulled or
	// loaded: one parked value per key with a pull on its way.
	waits map[string]*parked

	// vers are the versions of the states held here that came from another
	// member or the store. A state started here has none: its version is
	// base, with the write-behind's counter as Seq (see verOf).
	vers   map[string]hold.Version
	base   uint64 // ms, when this node started: the epoch of states started here
	origin uint64 // the origin of states started here
	wseq   uint64 // write-behind counter of the states started here

	viewID    uint64
	changedAt time.Time       // when the view last changed (the system clock)
	sentDone  uint64          // the view whose Done this node sent (to every member)
	doneView  uint64          // the view doneAcked is for
	doneAcked map[string]bool // the members that kept this node's Done for doneView
	pushFail  bool            // a push of this view could not be delivered: no Done for it
	outbox    map[string][]pushItem

	// settle.go: the view the next try is for, when it is due, and the
	// wait after it.
	settleView uint64
	settleNext time.Time
	settleWait time.Duration
}

// parked is the calls waiting on one key's pull.
type parked struct {
	done  chan struct{}
	to    string    // after done: where the key's calls go
	calls []*waiter // decided here when the pull ends here (release)
}

// waiter is one call parked on a key: the pull's end decides it, under the
// core's lock, as the core's Call would have once the state was here.
type waiter struct {
	req     *peer.Request
	x       *extra
	d       ringlimit.Decision
	err     error
	decided bool
}

// maxVers bounds the versions kept; past it, those of keys no longer held
// go (see sweep).
const maxVers = 1 << 20

func (o *owner) init(self string, seeded, stored bool, now int64) {
	o.core = hold.New(self)
	o.core.Seeded, o.core.Stored = seeded, stored
	o.core.Inc = uint64(time.Now().UnixNano()) // (this run of the node: peers tell it from a restart)
	o.waits = map[string]*parked{}
	o.vers = map[string]hold.Version{}
	o.outbox = map[string][]pushItem{}
	o.base = uint64(max(now, 1))
	o.origin = randOrigin()
	o.view.Store(ring.New(nil, 0))
	o.cur = view{Ring: ring.New(nil, 0)}
	o.gossip = o.cur
	o.leavers = map[string]uint64{}
}

// begin locks the core for an event.
func (o *owner) begin() {
	o.moving.Add(1)
	o.mu.Lock()
}

// end unlocks it, and lets the fast path start keys again if no key changes
// hands.
func (o *owner) end() {
	o.quiet.Store(o.core.Quiet() && o.core.Joined())
	o.mu.Unlock()
	o.moving.Add(-1)
}

// fresh reports whether no key changes hands here: no event is under way
// and the core is quiet.
func (o *owner) fresh() bool { return o.moving.Load() == 0 && o.quiet.Load() }

// freshSince reports whether the fast path may start a key that holds no
// state here (local asks it under the key's lock): no key changes hands,
// and the view the call was routed by, read at generation g, is still the
// core's. (Without the last, a call that read the ring, and was paused
// while the view changed, its keys were handed off and the change
// resolved, started afresh here a key its view had given away: in CI a
// leaky bucket admitted 101 of 100 in a rolling restart.)
func (o *owner) freshSince(g uint64) bool { return o.fresh() && o.gen.Load() == g }

// park parks w on key, and returns the calls parked there.
func (o *owner) park(key string, w *waiter) *parked {
	p := o.waits[key]
	if p == nil {
		p = &parked{done: make(chan struct{})}
		o.waits[key] = p
	}
	p.calls = append(p.calls, w)
	return p
}

// release ends the wait of the calls parked on key: they go to to, or, if
// to is "", they are decided here now (the key's state is here, or the key
// starts here). Under the lock.
func (n *Node) release(key, to string) {
	o := &n.own
	p := o.waits[key]
	if p == nil {
		return
	}
	delete(o.waits, key)
	p.to = to
	if n.tracing {
		n.trace("release", "key", key, "to", to, "calls", len(p.calls), "has", n.local.Has(key))
	}
	if to == "" {
		now := n.now()
		for _, w := range p.calls {
			w.d, w.err = n.decideLocked(context.Background(), now, w.req, w.x)
			w.decided = true
		}
	}
	close(p.done)
}

// verOf is the version of key's state here. Under the lock.
func (o *owner) verOf(key string) hold.Version {
	if v, ok := o.vers[key]; ok {
		return v
	}
	v := hold.Version{Epoch: o.base, Seq: o.wseq}
	v.Origins[0] = o.origin
	return v
}

// held is the version of key's state if it is here, nil if not. Under the
// lock.
func (o *owner) held(l *memstore.Limiter, key string) *hold.Version {
	if !l.Has(key) {
		return nil
	}
	v := o.verOf(key)
	return &v
}

// given is the version a state leaving this node takes. A state started
// here takes an origin of its own on its way out: should this node start
// the key again while it is elsewhere, the two merge when they meet.
func (o *owner) given(key string, now int64) hold.Version {
	v, ok := o.vers[key]
	if !ok {
		v = hold.Version{Epoch: o.base, Seq: o.wseq}
		v.Origins[0] = randOrigin()
	}
	delete(o.vers, key)
	return v.Next(now)
}

// writeVer is the version of a write-behind of key's state: its Seq goes up
// with every write.
func (o *owner) writeVer(key string) hold.Version {
	if v, ok := o.vers[key]; ok {
		v.Seq++
		o.vers[key] = v
		return v
	}
	o.wseq++
	return o.verOf(key)
}

// sweep drops the versions of keys no longer held here (evicted, or
// expired). Under the lock.
func (o *owner) sweep(l *memstore.Limiter) {
	if len(o.vers) < maxVers/2 {
		for k := range o.vers {
			if !l.Has(k) {
				delete(o.vers, k)
			}
		}
		return
	}
	clear(o.vers) // (past the bound: the keys restart their lineage here)
}

// randOrigin is the origin of a fresh start: a number no other start takes.
func randOrigin() uint64 { return rand.Uint64() | 1 }

// view is a ring with its members' incarnations, as the core sees it
// (hold.View and hold.Incarnations).
type view struct {
	*ring.Ring
	incs map[string]uint64
}

func (v view) Incarnation(name string) uint64 { return v.incs[name] }

// without is v without the member named name.
func (v view) without(name string) view { return view{ringWithout(v.Ring, name), v.incs} }

// id is the view's id: equal views (the same members, in the same
// incarnations) have equal ids on every node, and a member's restart makes
// another view.
func (v view) id() uint64 {
	d := xxhash.New()
	var b [8]byte
	for _, m := range v.Members() {
		binary.LittleEndian.PutUint64(b[:], uint64(len(m)))
		d.Write(b[:])
		d.WriteString(m)
		binary.LittleEndian.PutUint64(b[:], v.incs[m])
		d.Write(b[:])
	}
	return d.Sum64() | 1
}

// installLocked installs st (version ver) as key's state, merged with the
// state here if there is one (the core checked that the two were started
// apart). Under the lock.
func (n *Node) installLocked(key string, st ringlimit.State, ver hold.Version) {
	o := &n.own
	if cur, ok := n.local.Take(key); ok {
		st = memstore.Merge(cur, st)
		ver = hold.Join(o.verOf(key), ver)
	}
	// Marked changed: the next write-behind writes it. The giver's last
	// changes may not have reached the store (taking a state out drops
	// its mark), and the store tier decides from the store's copy.
	if n.local.ImportChanged(key, st) {
		n.stats.received.Add(1)
		o.vers[key] = ver
	}
	n.leases.arrived(key)
	if n.tracing {
		n.trace("installed", "key", key, "has", n.local.Has(key))
	}
}

// giveLocked takes key's state out of the local store for the member to, in
// a push or (answer) in the answer to its pull: the core keeps a copy in
// its mark until to confirms it. false if the state is not here. Under the
// lock.
func (n *Node) giveLocked(key, to string, now int64, answer bool) (pushItem, bool) {
	st, ok := n.local.Take(key)
	if !ok {
		return pushItem{}, false
	}
	o := &n.own
	ver := o.given(key, now)
	c := st
	if answer {
		o.core.GaveInAnswer(key, to, ver, &c, st.Until)
	} else {
		o.core.Gave(key, to, ver, &c, st.Until)
	}
	if n.tracing {
		n.trace("gave", "key", key, "to", to)
	}
	return pushItem{key: key, st: st, ver: ver, inc: o.core.MarkInc(key)}, true
}

// sendLocked gives key's state to the member to and queues it for the push
// loop. Under the lock.
func (n *Node) sendLocked(key, to string, now int64) {
	if it, ok := n.giveLocked(key, to, now, false); ok {
		n.own.outbox[to] = append(n.own.outbox[to], it)
		n.kick()
	}
}

// setVersion fences a write of ks with v (see remote.KeyState.Ver).
func setVersion(ks *remote.KeyState, v hold.Version) {
	ks.Ver = remote.Version{Epoch: v.Epoch, Seq: v.Seq, Origins: v.Origins}
}

// fromRemote is the version the store holds.
func fromRemote(v remote.Version) hold.Version {
	return hold.Version{Epoch: v.Epoch, Seq: v.Seq, Origins: v.Origins}
}

// changingLocked reports whether keys may still change hands here: the
// node leaves, a pull is on its way, or a change of the last HandoffWindow
// (on the system clock) is not resolved by every live member's Done yet.
// Under the lock.
func (n *Node) changingLocked() bool {
	c := n.own.core
	return c.ChangingSince(math.MaxInt64) || c.Changing() && time.Since(n.own.changedAt) < n.cfg.HandoffWindow
}
