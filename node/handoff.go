package node

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/hold"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/remote"
	"github.com/ringlimit/ringlimit/ring"
)

// Hand-off: the shell's side of the ownership core (internal/hold, whose
// package docs give the protocol). The core says what to do; this file
// does it over the peer link (holdwire.go) and the store:
//
//   - a ring change: the core takes the new view (ringChanged), and the push
//     loop gives the states of keys other members own now to them, then
//     tells every member Done once they have all confirmed;
//   - a call on a key whose state may be elsewhere: one pull at a time per
//     key (drivePull), asking the members the core names, then loading
//     from the store if none has it; the calls on the key wait for it
//     (route.go's here);
//   - a pull asked of this node, a push that arrived, a push confirmed, a
//     member's Done (serveHold);
//   - Close: the core leaves, and every state goes to its owner in the ring
//     without this node (handOffAll).
//
// No lock is held while a message is on the wire.

// maxHops bounds the "moved" answers one call follows; past it the store
// decides.
const maxHops = 6

// batchBytes is the size a push batch is cut at.
const batchBytes = 256 << 10

// errPeerGone: the member a message was for is not in this node's
// membership.
var errPeerGone = errors.New("node: hand-off target is not a member")

// ringWithout returns r without the member named name.
func ringWithout(r *ring.Ring, name string) *ring.Ring {
	var ms []string
	for _, m := range r.Members() {
		if m != name {
			ms = append(ms, m)
		}
	}
	return ring.New(ms, r.VirtualNodes())
}

// now reads the node's clock.
func (n *Node) now() time.Time {
	if n.cfg.Clock != nil {
		return n.cfg.Clock.Now()
	}
	return time.Now()
}

// nowMs is the node's clock in ms.
func (n *Node) nowMs() int64 { return n.now().UnixMilli() }

// ringChanged gives the core the new view: the membership's ring, less the
// members known to leave (see leaves). It runs on the membership's
// goroutine after each change.
func (n *Node) ringChanged(r *ring.Ring, incs map[string]uint64) {
	o := &n.own
	o.begin()
	o.gossip = view{r, incs}
	n.applyView()
}

// leaves records that the member named name, in its incarnation inc, leaves:
// it refused a push as a leaver. Until the membership says so too, this
// node's view holds it no more, so that this node sends it no state and no
// call, and its keys go to their next owners at once.
func (n *Node) leaves(name string, inc uint64) {
	o := &n.own
	o.begin()
	if o.leavers[name] == inc || o.gossip.incs[name] != inc || !o.gossip.Contains(name) {
		o.end() // known already, or gone or restarted since
		return
	}
	if len(o.leavers) >= maxLeavers {
		clear(o.leavers)
	}
	o.leavers[name] = inc
	if n.tracing {
		n.trace("leaver", "member", name, "inc", inc)
	}
	n.applyView()
}

// maxLeavers bounds the leavers remembered (past it they are forgotten:
// their refusals teach them again).
const maxLeavers = 256

// applyView gives the core the membership's ring less the leavers, if that
// is a new view. It ends the event begun by its caller.
func (n *Node) applyView() {
	o := &n.own
	v := o.gossip
	if len(o.leavers) > 0 {
		var keep []string
		for _, m := range v.Members() {
			if inc, ok := o.leavers[m]; !ok || v.incs[m] != inc {
				keep = append(keep, m)
			}
		}
		for m, inc := range o.leavers {
			if !v.Contains(m) || v.incs[m] != inc {
				delete(o.leavers, m) // gone, or back in another incarnation
			}
		}
		if len(keep) != v.Len() {
			v = view{ring.New(keep, v.VirtualNodes()), v.incs}
		}
	}
	r, id := v.Ring, v.id()
	prev := o.view.Load()
	if prev.Len() == 0 {
		prev = nil // the first ring: calls decided before it had none to go by
	}
	changed := id != o.viewID
	if changed {
		if n.tracing {
			n.trace("view", "view", id, "members", r.Members())
		}
		o.core.SetView(v, v.without(n.name), id, n.nowMs())
		o.viewID, o.pushFail, o.cur, o.changedAt = id, false, v, time.Now()
		o.view.Store(r)
		o.gen.Add(1)
		// The arcs this node lost, recorded with the view under the lock:
		// a push that sees the view sees them (see pushOnce).
		n.moves.lost(prev, r, n.name)
	}
	joined := o.core.Joined()
	o.end()
	if !changed {
		return
	}
	if r.Len() > 1 {
		n.joinedOnce.Do(func() { close(n.joined) })
	}
	if joined {
		n.decideOnce.Do(func() { close(n.deciding) })
	}
	n.kick()
}

// kick wakes the push loop.
func (n *Node) kick() {
	select {
	case n.kickPush <- struct{}{}:
	default:
	}
}

// pushLoop gives away the states of keys other members own, after each
// change and whenever a stray is recorded, and sends Done.
func (n *Node) pushLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.kickPush:
		}
		n.pushOnce()
	}
}

// pushOnce gives every state held here whose key another member owns (in
// the core's view, or in the ring without this node while it leaves) to
// that member, pushes them, and says Done if it may. What it visits: the
// arcs this node lost since the last push and the stray keys (moves), or
// every key. It returns how many states it gave.
func (n *Node) pushOnce() (given int) {
	var keys []string
	add := func(key string, _ memstore.State) bool {
		keys = append(keys, key) // (a key of several indexes comes once each: the second give finds nothing)
		return true
	}
	// The moves and the view they are for, in one step: Done for a view is
	// said only by a push that took its moves (a push that ran while the
	// view came, on the moves of the one before, must not say it).
	n.own.mu.Lock()
	arcs, strays, all := n.moves.take()
	leaving, vid := n.own.core.Leaving(), n.own.viewID
	n.own.mu.Unlock()
	if all || leaving {
		n.local.Range(add)
	} else {
		if len(arcs) > 0 {
			n.local.RangeArcs(arcs, add)
		}
		for key := range strays {
			keys = append(keys, key)
		}
	}
	o := &n.own
	now := n.nowMs()
	o.begin()
	for _, key := range keys {
		if to := o.core.Stray(ring.Hash(key)); to != "" {
			if it, ok := n.giveLocked(key, to, now, false); ok {
				o.outbox[to] = append(o.outbox[to], it)
				given++
			}
		}
	}
	out := o.outbox
	o.outbox = map[string][]pushItem{}
	o.end()
	for _, to := range sortedNames(out) {
		items := out[to]
		for len(items) > 0 {
			k, size := 0, 0
			for k < len(items) && (k == 0 || size < batchBytes) {
				size += 64 + len(items[k].key) + len(encodeState(items[k].st))
				k++
			}
			n.push(to, items[:k])
			items = items[k:]
		}
	}
	n.maybeDone(vid)
	return given
}

func sortedNames[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// push sends items to the member to, and handles its answer: a state it
// took is confirmed (the core drops its copy); one it refused (it leaves)
// comes back here. A push whose answer is lost may have been installed:
// it is sent again, at most twice, with what the core still holds for to.
// One that cannot be delivered stays given (to, or its next owner, pulls
// the copy), and goes to the store for a crash.
func (n *Node) push(to string, items []pushItem) {
	o := &n.own
	o.mu.Lock()
	vid := o.viewID
	o.mu.Unlock()
	for try := 0; ; try++ {
		res, err := n.holdCall(to, &holdMsg{kind: holdPush, from: n.name, viewID: vid, items: items}, n.pushTimeout())
		refusedAll := err == nil && res.Err != nil || errors.Is(err, ringlimit.ErrClosed)
		if refusedAll || err == nil && len(res.State) == len(items) {
			if leaver := errors.Is(err, ringlimit.ErrClosed) || err == nil && slices.Contains(res.State, refusedLeaving); leaver && len(items) > 0 {
				n.leaves(to, items[0].inc) // (first: the states come back to this node's new view)
			}
			o.begin()
			for i, it := range items {
				if n.tracing {
					n.trace("pushed", "key", it.key, "to", to, "refused", refusedAll || res.State[i] != 0)
				}
				if !refusedAll && res.State[i] == 0 {
					o.core.Confirmed(it.key, to, it.ver)
					n.stats.handedOff.Add(1)
					continue
				}
				if st, ver, ok := o.core.TakeBack(it.key, to); ok {
					n.installLocked(it.key, *st, ver)
					n.release(it.key, "")
					if o.core.Stray(ring.Hash(it.key)) != "" {
						n.moves.stray(it.key) // the next change sends it on
					}
				}
			}
			o.end()
			return
		}
		o.mu.Lock()
		var again []pushItem
		for _, it := range items {
			if st, ver, ok := o.core.Pending(it.key, to); ok {
				again = append(again, pushItem{key: it.key, st: *st, ver: ver, inc: it.inc})
			}
		}
		if n.tracing {
			n.trace("push unanswered", "to", to, "items", len(items), "again", len(again), "try", try, "err", err)
		}
		if try >= 2 || len(again) == 0 || !n.members.Ring().Contains(to) {
			if len(again) > 0 {
				o.pushFail = true
			}
			o.mu.Unlock()
			n.warn.Warn("hand-off push failed", "node: hand-off push failed; the states stay given, and go to the store",
				"node", n.name, "to", to, "keys", len(again), "err", err)
			n.stats.handoffFailures.Add(uint64(len(again)))
			n.writeLost(again)
			return
		}
		o.mu.Unlock()
		items = again
	}
}

// maybeDone tells every member Done for the view vid once this node's
// pushes for it are confirmed and the core is Clean, once per view.
func (n *Node) maybeDone(vid uint64) {
	o := &n.own
	o.mu.Lock()
	if o.viewID != vid || o.pushFail || len(o.outbox) > 0 || !o.core.Clean() || o.core.Leaving() || o.sentDone == o.viewID {
		o.mu.Unlock()
		return
	}
	id, members := o.viewID, o.view.Load().Members()
	if o.doneView != id {
		o.doneView, o.doneAcked = id, map[string]bool{}
	}
	var to []string
	for _, m := range members {
		if m != n.name && !o.doneAcked[m] {
			to = append(to, m)
		}
	}
	o.mu.Unlock()
	ok := true
	for _, m := range to {
		res, err := n.holdCall(m, &holdMsg{kind: holdDone, from: n.name, viewID: id}, 0)
		// A member that has not seen the view yet keeps no Done for it
		// (it answers 0): it is told again on the node's next tick
		// (retryDone). One of the release before answers nothing, kept or
		// not: it is told again too, until the hand-off window ends (a
		// Done said twice is harmless).
		if !doneKept(res, err) {
			ok = false
			continue
		}
		o.mu.Lock()
		if o.doneView == id {
			o.doneAcked[m] = true
		}
		o.mu.Unlock()
	}
	if n.tracing {
		n.trace("done sent", "view", id, "ok", ok)
	}
	if ok {
		o.mu.Lock()
		if o.viewID == id {
			o.sentDone = id
		}
		o.mu.Unlock()
	}
}

// doneKept reports whether a member's answer to Done says it kept it: 1.
// 0 is a member that has not seen the view yet; an empty answer one of the
// release before, which does not say.
func doneKept(res peer.Result, err error) bool {
	return err == nil && len(res.State) > 0 && res.State[0] == 1
}

// retryDone kicks the push loop, on the node's ticker, while this node's
// Done for its view has not reached every member (some had not seen the
// view yet, or did not answer), for at most HandoffWindow after the view
// came: a Done that was not kept leaves the change unresolved there.
func (n *Node) retryDone() {
	o := &n.own
	o.mu.Lock()
	again := o.doneView == o.viewID && o.sentDone != o.viewID && time.Since(o.changedAt) < n.cfg.HandoffWindow
	o.mu.Unlock()
	if again {
		n.kick()
	}
}

// holdCall sends a hand-off message to the member to and waits for its
// answer at most timeout (0: the peer's effective timeout).
func (n *Node) holdCall(to string, m *holdMsg, timeout time.Duration) (peer.Result, error) {
	pc := n.peers.get(to)
	if pc == nil && !n.members.Ring().Contains(to) {
		// Not in this node's membership yet (it learnt of it from a
		// peer), or only suspected for a moment; a member that left long
		// ago fails at once.
		if n.recentlyGone(to) {
			return peer.Result{}, errPeerGone
		}
		pc = n.awaitPeer(context.Background(), to, time.Now().Add(n.cfg.ForwardTimeout/3))
		if pc == nil {
			n.markGone(to)
		}
	}
	if pc == nil {
		return peer.Result{}, errPeerGone
	}
	if timeout == 0 {
		timeout = pc.client.timeout()
	}
	res, err := pc.bulk.DoTimeout(context.Background(), holdRequest(m), timeout)
	if err == nil && res.Err != nil {
		err = res.Err
	}
	return res, err
}

// startPull runs the pull (or load) the core asked for a's key, in the
// background: the calls on the key wait for it.
func (n *Node) startPull(key string, h uint64, a hold.Action) {
	n.bgMu.Lock()
	defer n.bgMu.Unlock()
	if n.bgOff {
		// Closing: nobody is asked; the key is given up on, here and now.
		n.endPull(key, h, a)
		return
	}
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		n.drivePull(key, h, a)
	}()
}

// endPull ends a pull the node cannot run (it closes): every step fails.
func (n *Node) endPull(key string, h uint64, a hold.Action) {
	o := &n.own
	for a.Kind == hold.Pull || a.Kind == hold.Load {
		o.begin()
		o.core.Stop() // (a member the view has alive is given up too)
		if a.Kind == hold.Pull {
			a = o.core.Pulled(key, h, a.To, hold.Answer{Kind: hold.Unreachable}, o.held(n.local, key), n.nowMs())
		} else {
			a = o.core.Loaded(key, "", 0)
		}
		if a.Kind != hold.Pull && a.Kind != hold.Load {
			n.release(key, a.To)
		}
		o.end()
	}
}

// drivePull asks the members the core names for key's state, one after the
// other, then the store, until the core says where the key is decided, and
// wakes the calls waiting on it.
func (n *Node) drivePull(key string, h uint64, a hold.Action) {
	o := &n.own
	for {
		switch a.Kind {
		case hold.Pull:
			from := a.To
			start := time.Now()
			ans := n.askPull(key, a)
			now := n.nowMs()
			o.begin()
			held := o.held(n.local, key)
			act := o.core.Pulled(key, h, from, ans, held, now)
			if n.tracing {
				n.trace("pulled", "key", key, "from", from, "answer", ans.Kind, "answerTo", ans.To, "st", ans.St != nil, "held", held != nil, "act", act.Kind, "to", act.To, "install", act.Install, "pushTo", act.PushTo)
			}
			if act.Install {
				st, ver := ans.St, ans.Ver
				if act.St != nil {
					st, ver = act.St, act.Ver
				}
				if st != nil {
					n.installLocked(key, *st, ver)
				}
			}
			done := n.afterPull(key, h, act, now)
			o.end()
			if (ans.Kind == hold.Unreachable || ans.Kind == hold.Coming) && act.Kind == hold.Pull && act.To == from && n.members.Ring().Contains(from) && !n.pullPause(from, start) {
				// (Asked again: the core never gives up a member the view
				// has alive, nor one whose answer says the state is on its
				// way here (Coming). At most once its timeout, and not past
				// Close; a member not in the view is asked at once, and
				// given up after a few tries.)
				n.endPull(key, h, act)
				return
			}
			if act.Install && act.St == nil {
				// The member drops the copy it kept for this node.
				n.holdCall(from, &holdMsg{kind: holdConfirm, from: n.name, items: []pushItem{{key: key, ver: ans.Ver}}}, 0)
			}
			if act.Drop != "" {
				// Given up on: a state it gave in an answer that never came
				// goes back to it (best effort: it is unreachable, or was).
				n.holdCall(act.Drop, &holdMsg{kind: holdDrop, from: n.name, items: []pushItem{{key: key}}}, 0)
			}
			if done {
				return
			}
			a = act
		case hold.Load:
			l := n.load(key, a.Cleared)
			now := n.nowMs()
			o.begin()
			act := o.core.Loaded(key, l.holder, l.holderInc)
			if n.tracing {
				n.trace("loaded", "key", key, "found", l.st != nil, "err", l.err, "holder", l.holder, "cleared", a.Cleared, "act", act.Kind, "to", act.To)
			}
			if act.Kind == hold.Decide && l.st != nil && !n.local.Has(key) {
				if n.local.Import(key, *l.st) {
					// A load starts a branch of its own: two nodes that
					// load one key apart merge when they meet.
					o.vers[key] = l.ver.Loaded(now, randOrigin())
				}
				n.leases.arrived(key)
			}
			done := n.afterPull(key, h, act, now)
			o.end()
			if done {
				return
			}
			a = act
		default:
			return
		}
	}
}

// afterPull does what the core said after a pull's step, under the lock,
// and reports whether the pull is over.
func (n *Node) afterPull(key string, h uint64, act hold.Action, now int64) bool {
	o := &n.own
	switch act.Kind {
	case hold.Pull, hold.Load:
		return false
	case hold.Decide:
		n.release(key, "")
		if to := o.core.Stray(h); to != "" {
			n.sendLocked(key, to, now) // (a leaving node's too: it keeps nothing)
		}
	case hold.Forward:
		if act.PushTo != "" {
			n.sendLocked(key, act.PushTo, now)
		}
		n.release(key, act.To)
	default:
		n.release(key, "")
	}
	return true
}

// pullPause waits, after a pull of the member from that began at start and
// got no answer, until the member's timeout has passed since start: a pull
// asked again does not spin on a refused or failing connection. false if
// the node stops meanwhile.
func (n *Node) pullPause(from string, start time.Time) bool {
	d := n.cfg.ForwardTimeout
	if pc := n.peers.get(from); pc != nil {
		d = pc.client.timeout()
	}
	if left := d - time.Since(start); left > 0 {
		return n.pause(context.Background(), left)
	}
	select {
	case <-n.stop:
		return false
	default:
		return true
	}
}

// askPull asks the member a.To for key's state.
func (n *Node) askPull(key string, a hold.Action) hold.Answer {
	n.own.mu.RLock()
	path := slices.Clone(n.own.core.Path(key))
	n.own.mu.RUnlock()
	m := &holdMsg{kind: holdPull, from: n.name, key: key, want: a.Inc, gone: a.Gone, goneInc: a.GoneInc, path: path}
	res, err := n.holdCall(a.To, m, 0)
	if err != nil {
		if isRefused(err) {
			// Its port refused: the membership checks whether its
			// process is gone, and drops it then (the core gives up on a
			// member only once the view has dropped it).
			n.members.Refused(a.To)
		}
		return hold.Answer{Kind: hold.Unreachable, Leaving: n.leaverStillMember(a.To)}
	}
	ans, err := parseAnswer(res.State)
	if err != nil {
		n.warn.Warn("bad hand-off answer", "node: bad answer to a pull", "node", n.name, "from", a.To, "err", err)
		return hold.Answer{Kind: hold.Unreachable}
	}
	n.stats.pulls.Add(1)
	return ans
}

// leaverStillMember reports whether the member named name is a leaver
// this node's view dropped early (it refused a push as one: see leaves)
// while the membership still has it: its leave is no death, it may hold
// what it gave in an answer not confirmed yet, and the core asks it again
// (Answer.Leaving) until it leaves the membership.
func (n *Node) leaverStillMember(name string) bool {
	if !n.members.Ring().Contains(name) {
		return false
	}
	o := &n.own
	o.mu.RLock()
	_, ok := o.leavers[name]
	o.mu.RUnlock()
	return ok
}

// loaded is what a load from the store found.
type loaded struct {
	st        *ringlimit.State
	ver       hold.Version
	holder    string // another member's claim on the key stands
	holderInc uint64
	err       error // the store could not be read
}

// load reads key's state from the store, if there is one and it answers
// within the load timeout.
func (n *Node) load(key string, cleared []string) loaded {
	if n.states == nil {
		return loaded{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.loadTimeout())
	defer cancel()
	// The load claims the key in the same script (see hold.Action.Cleared):
	// another member's claim stands unless this pull cleared it.
	l, err := n.states.ClaimState(ctx, key, remote.Claim{Member: n.name, Inc: n.own.core.Inc, Cleared: cleared, TTL: claimTTL})
	if err != nil {
		n.stats.loadFailures.Add(1)
		return loaded{err: err}
	}
	n.stats.loads.Add(1)
	if l.Holder != "" && l.Holder != n.name {
		return loaded{holder: l.Holder, holderInc: l.HolderInc}
	}
	if !l.Found {
		return loaded{}
	}
	rs, ttl := l.State, l.TTL
	now := n.nowMs()
	if ttl > 0 {
		rs.Until = now + ttl.Milliseconds()
	} // else index 0 has gone: Import skips it and installs the others
	for i := range rs.More { // their Until is their remaining TTL in ms
		rs.More[i].Until += now
	}
	return loaded{st: &rs, ver: fromRemote(l.Ver)}
}

// claimTTL is how long a load's claim on a key stands in the store: as
// long as the core keeps what it knows of a key (hold.Core.MaxUntil).
const claimTTL = 25 * time.Hour

// loadTimeout bounds a load from the store.
func (n *Node) loadTimeout() time.Duration { return max(n.cfg.StoreTimeout, n.cfg.ForwardTimeout/3) }

// serveHold serves a hand-off message from a peer.
func (n *Node) serveHold(items []peer.Item) peer.Result {
	if !isHold(items) {
		// A push of the release before the core: refused, so its sender
		// keeps the states.
		return peer.Result{Err: ringlimit.ErrClosed}
	}
	m, err := parseHold(items)
	if err != nil {
		n.stats.badHold.Add(1)
		n.warn.Warn("bad hand-off message", "node: bad hand-off message", "node", n.name, "err", err)
		return peer.Result{Err: err}
	}
	if n.closed.Load() {
		return peer.Result{Err: ringlimit.ErrClosed}
	}
	o := &n.own
	now := n.nowMs()
	switch m.kind {
	case holdPull:
		h := ring.Hash(m.key)
		o.begin()
		r := o.core.Asked(hold.Ask{Key: m.key, Hash: h, From: m.from, Inc: m.want, Path: m.path,
			Gone: m.gone, GoneInc: m.goneInc, Has: n.local.Has(m.key), Now: now, Fork: randOrigin()})
		a := r.A
		if n.tracing {
			n.trace("asked", "key", m.key, "from", m.from, "want", m.want, "path", m.path, "gone", m.gone, "give", r.Give, "answer", a.Kind, "answerTo", a.To)
		}
		if r.Give {
			if it, ok := n.giveLocked(m.key, m.from, now, true); ok {
				a = hold.Answer{Kind: hold.State, St: &it.st, Ver: it.ver}
				n.stats.handedOff.Add(1)
			} else {
				a = hold.Answer{Kind: hold.None}
			}
		}
		o.end()
		return peer.Result{State: appendAnswer(nil, a)}
	case holdPush:
		refused := make([]byte, len(m.items))
		for i, it := range m.items {
			h := ring.Hash(it.key)
			o.begin()
			held := o.held(n.local, it.key)
			ar := hold.Arrival{Key: it.key, Hash: h, From: m.from, Inc: it.inc, Ver: it.ver, Has: held != nil, Now: now}
			if held != nil {
				ar.Held = *held
			}
			install, on, ref := o.core.Arrived(ar)
			if ref {
				refused[i] = refusedOther
				if o.core.Leaving() {
					refused[i] = refusedLeaving // the sender learns it leaves
				}
			}
			if n.tracing {
				n.trace("arrived", "key", it.key, "from", m.from, "has", held != nil, "install", install, "on", on, "refused", ref)
			}
			if install {
				n.installLocked(it.key, it.st, it.ver)
				if on != "" {
					n.sendLocked(it.key, on, now) // (the calls waiting here go after it)
				}
				n.release(it.key, on)
			}
			o.end()
		}
		return peer.Result{State: refused}
	case holdConfirm:
		o.begin()
		for _, it := range m.items {
			o.core.Confirmed(it.key, m.from, it.ver)
		}
		o.end()
	case holdDrop:
		o.begin()
		for _, it := range m.items {
			st, ver, ok := o.core.Dropped(it.key, m.from)
			if n.tracing {
				n.trace("dropped", "key", it.key, "by", m.from, "back", ok)
			}
			if ok {
				n.installLocked(it.key, *st, ver)
				n.release(it.key, "")
				if to := o.core.Stray(ring.Hash(it.key)); to != "" {
					n.sendLocked(it.key, to, now)
				}
			}
		}
		o.end()
	case holdSettle:
		// A word, not an event: nothing changes here.
		o.mu.Lock()
		w := settleWord{idle: o.core.ViewID() == m.viewID && n.idleLocked(), arrivals: o.core.Arrivals()}
		o.mu.Unlock()
		return peer.Result{State: appendSettleWord(nil, w)}
	case holdDone:
		o.begin()
		clean, known := o.core.Done(m.from, m.viewID)
		seen := known || o.core.ViewID() == m.viewID
		o.end()
		if n.tracing {
			n.trace("done from", "from", m.from, "view", m.viewID, "known", known, "clean", clean)
		}
		if clean {
			n.kick() // (the push loop says Done in turn)
		}
		if !seen {
			return peer.Result{State: []byte{0}} // not seen yet, so not kept: say it again later
		}
		return peer.Result{State: []byte{1}}
	}
	return peer.Result{}
}

// writeLost writes states that could not be handed off to the store.
func (n *Node) writeLost(lost []pushItem) {
	if n.states == nil || len(lost) == 0 {
		return
	}
	now := n.nowMs()
	ks := make([]remote.KeyState, len(lost))
	for i, g := range lost {
		ks[i] = remote.KeyState{Key: g.key, State: g.st, TTL: ringlimit.Millis(g.st.Until - now)}
		setVersion(&ks[i], g.ver) // (the version it was given with: newer than its holder's writes so far)
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(n.cfg.StoreTimeout, time.Second))
	defer cancel()
	if n.states.WriteStates(ctx, ks) == nil {
		n.stats.writes.Add(uint64(len(ks)))
	}
}

func (n *Node) pushTimeout() time.Duration { return max(40*n.cfg.ForwardTimeout, 2*time.Second) }

// handOffAll is the first step of Close: the core leaves (every key goes to
// its owner in the ring without this node from now on, and pushed states
// are refused), and the push loop's work is done here: every state goes to
// its owner in the ring without this node, and again what a peer refused
// (it leaves too: this node's view drops it, and the state goes to the next
// owner), so that the node leaves the gossip holding nothing. The states
// that cannot be delivered are written to the store, if there is one.
func (n *Node) handOffAll() {
	o := &n.own
	o.begin()
	o.core.Leave(o.cur.without(n.name))
	o.gen.Add(1)
	o.end()
	deadline := time.Now().Add(n.pushTimeout())
	n.handOffRounds(deadline)
	n.awaitTaken(deadline)
}

// awaitTaken waits, after the hand-off's push, until every state this node
// gave away is confirmed by its taker (Core.Unconfirmed), at most until
// deadline, before Close leaves the membership: its peers drop their
// connections to a member that left, and can ask it nothing more. A state
// given in a pull's answer that is still on its way (or was lost) is kept
// here as a copy until the taker confirms it, and the taker's next pull
// gets it; gone with this node, the copy would be lost while its taker,
// given up on asking, started the key from the store (the simulator found
// it: swarm seed 1093). What comes back meanwhile (a taker that gave up,
// Dropped) is pushed on again.
func (n *Node) awaitTaken(deadline time.Time) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	o := &n.own
	for {
		o.mu.RLock()
		left := o.core.Unconfirmed()
		o.mu.RUnlock()
		if left == 0 || time.Now().After(deadline) {
			return
		}
		if n.local.Stats().Keys > 0 {
			n.handOffRounds(deadline)
		}
		select {
		case <-t.C:
		case <-n.stop:
			return
		}
	}
}

// handOffRounds pushes every state held here to its owner, round after
// round while a round gives something and states are left, at most
// maxHandOffRounds rounds and until deadline.
func (n *Node) handOffRounds(deadline time.Time) {
	for range maxHandOffRounds {
		if n.local.Stats().Keys == 0 || time.Now().After(deadline) || n.pushOnce() == 0 {
			return
		}
	}
}

// maxHandOffRounds bounds the rounds of a leaving node's push: each one
// follows a refusal (its target leaves too) with the next owner.
const maxHandOffRounds = 8

// finishHandOff is the last step of Close's hand-off, once the node has
// left the gossip, stopped serving peers and its pulls have ended: what
// came back to it since its push (a push of its own that a peer refused, a
// pull's answer that arrived late) goes to its owner too (handOffRounds);
// what is still here then is written to the store.
func (n *Node) finishHandOff() {
	n.handOffRounds(time.Now().Add(n.pushTimeout()))
	var left []pushItem
	n.own.mu.Lock()
	n.local.Range(func(key string, st memstore.State) bool {
		left = append(left, pushItem{key: key, st: st, ver: n.own.verOf(key)})
		return true
	})
	n.own.mu.Unlock()
	switch {
	case len(left) == 0:
	case n.states == nil:
		// A node alone, or the last to leave, with no store: nowhere to
		// put them, and no fault.
		n.cfg.Logger.Info("node: closing: key states dropped (no other member took them, and no store is configured)",
			"node", n.name, "keys", len(left))
	default:
		n.warn.Warn("hand-off left states", "node: closing with states no member took; they go to the store",
			"node", n.name, "keys", len(left))
		n.writeLost(left)
	}
}

// awaitPeer waits until deadline at most for the member named name to
// appear in this node's membership (a peer that already knows it redirected
// a call to it, or it was only suspected for a moment), and returns its
// connection.
func (n *Node) awaitPeer(ctx context.Context, name string, deadline time.Time) *peerConn {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.stop:
			return nil
		case <-t.C:
			return nil
		case <-tick.C:
		}
		if pc := n.peers.get(name); pc != nil {
			return pc
		}
	}
}

// tick lets the core drop what has expired, and ends a seeded node's wait
// for its cluster once the hand-off window after New is over.
func (n *Node) tick() {
	o := &n.own
	o.begin()
	o.core.Tick(n.nowMs())
	if !o.core.Joined() && time.Since(n.started) >= n.cfg.HandoffWindow {
		o.core.Alone()
	}
	o.sweep(n.local)
	joined := o.core.Joined()
	o.end()
	if joined {
		n.decideOnce.Do(func() { close(n.deciding) })
	}
}

// recentlyGone reports whether a message to the member named name found it
// gone from the membership lately (within a second): the next one does not
// wait for it again.
func (n *Node) recentlyGone(name string) bool {
	n.goneMu.Lock()
	defer n.goneMu.Unlock()
	at, ok := n.gone[name]
	return ok && time.Since(at) < time.Second
}

// markGone records that the member named name was not found.
func (n *Node) markGone(name string) {
	n.goneMu.Lock()
	defer n.goneMu.Unlock()
	if n.gone == nil || len(n.gone) >= maxGone {
		n.gone = map[string]time.Time{}
	}
	n.gone[name] = time.Now()
}

// maxGone bounds the members recentlyGone remembers.
const maxGone = 1024

// isRefused reports whether a hand-off call failed because the member's
// port refused the connection: its process may be gone.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
