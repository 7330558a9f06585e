package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/hold"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/ring"
)

// The routing chain: one call goes down it once, top to bottom.

// next says where a call goes after one step of the chain: "" (decided, or
// an error to return), a member's name (ask it, with From set), or one of
// these.
const (
	toStore = "\x00store" // nobody here or at a peer can decide it: the store tier
	reroute = "\x00ring"  // the member asked left during the call: ask the ring again
)

// AllowN consumes n hits on key if rule admits them now; n == 0 is a Peek.
//
// The key's holder decides: this node from its memory if it owns key
// (Source Local); else the owning peer, over its connection (Source Peer);
// if the peer cannot answer within its effective timeout or its breaker is
// open, the central store (Source Store); if that cannot answer either,
// Policy (Source Fallback). While ownership changes, a key's state follows
// it (see the ownership core, internal/hold): a node that gave a key away
// sends its calls on to the new holder, and a new owner takes the state
// from the member that held it before it decides. Errors: bad input, a
// closed node, a cancelled context.
func (n *Node) AllowN(ctx context.Context, key string, rule ringlimit.Rule, hits int64) (d ringlimit.Decision, err error) {
	_, err = n.call(ctx, &d, &peer.Request{Op: peer.OpAllow, Key: key, Rule: rule, N: hits}, nil)
	return d, err
}

// call is the one chain of the calls made on this node (AllowN's and
// AllowAll's), top to bottom: one validation, one hash, one decision of
// where.
//
//   - The input is checked at the door for what the hash and the core need
//     (the key; AllowAll's number of rules); the rule and hits once, where
//     the call is decided: by the local store here (it keeps the last rule
//     it checked per shard), or before the call leaves this node (chain).
//   - The clock is read once, the key hashed once: the ring, the core and
//     the local store all take that hash.
//   - This node owns the key in its view of the ring: the owned path
//     decides it, unless the key's state is on its way here; then the
//     ownership core here says where it is (route, from "").
//   - A peer owns it: a lease this node holds of the key may cover it
//     (fromLease); else route asks the owner, or, while keys change hands,
//     the core here first (the key's state may still be here).
//   - Then the leases take their one step (leased): a denial here while
//     leases of the key are out recalls them, and if hits came back the
//     call goes down the chain again.
//
// The decision goes to *d and is counted (observe); AllowAll's are
// appended to dst, and returned (on an error, dst as it was).
func (n *Node) call(ctx context.Context, d *ringlimit.Decision, req *peer.Request, dst []ringlimit.Decision) (all []ringlimit.Decision, err error) {
	var start time.Time
	if n.obs.on.Load() { // metrics: time a sample (observe.go)
		start = n.obs.start()
	}
	switch {
	case n.closed.Load():
		return dst, ringlimit.ErrClosed
	case req.Op == peer.OpAllowAll:
		if len(req.Rules) == 0 || len(req.Rules) > ringlimit.MaxRules {
			return dst, ringlimit.ValidateRules(req.Rules)
		}
	case uint(len(req.Key)-1) >= ringlimit.MaxKeyLen: // empty (wraps round) or too long
		return dst, ringlimit.ValidateKey(req.Key)
	}
	now, h := n.now(), ring.Hash(req.Key)
	g := n.own.gen.Load() // (before the view: see freshSince)
	at, done := n.own.view.Load().OwnerOfHash(h), false
	switch {
	case at == n.name || at == "":
		all, done, err = n.owned(d, dst, now, h, req, g)
		at = "" // not decided: its state may be on its way, the core here says where it is
	case req.Op == peer.OpAllow:
		*d, done = n.fromLease(req.Key, req.Rule, req.N)
	}
	if !done {
		if !n.own.fresh() {
			at = "" // keys change hands: its state may be here, the core says where it is
		}
		all, err = n.chain(ctx, d, now, h, at, req, dst)
	}
	if n.leased(ctx, req, d, err, false, time.Time{}) {
		all, err = n.chain(ctx, d, n.now(), h, "", req, dst) // hits came back: decide it again
	}
	if err != nil {
		return dst, err
	}
	if req.Op == peer.OpAllowAll {
		n.observeAll(ctx, start, all[len(dst):])
	} else {
		n.observe(ctx, start, d, &err)
	}
	return all, nil
}

// owned is the owned path, written once, for a key this node owns in its
// view of the ring (a call made here, or one a peer sent that is answered
// on the connection's reader): the local store decides req (OpAllow into
// *d; OpAllowAll appending to dst) under its own lock alone, if the key's
// state is here, or if no key changes hands and the view read at
// generation g, which gave the key to this node, is still the core's
// (owner.freshSince). No allocation. done is false if it decided nothing:
// the key's state may be on its way, or have left.
func (n *Node) owned(d *ringlimit.Decision, dst []ringlimit.Decision, now time.Time, h uint64, req *peer.Request, g uint64) (all []ringlimit.Decision, done bool, err error) {
	var ok bool
	had := !n.tracing || n.local.Has(req.Key) // (the trace logs a key started here)
	if req.Op == peer.OpAllowAll {
		if all, ok, err = n.local.AllowAllIfAt(dst, now, req.Key, h, req.Rules, req.N, memstore.Gate{Fresh: n.fresh, Tok: g}); ok {
			*d = all[len(dst)]
		}
	} else {
		ok, err = n.local.AllowNIfAt(d, now, req.Key, h, req.Rule, req.N, memstore.Gate{Fresh: n.fresh, Tok: g})
	}
	if ok && !had {
		n.traceFresh(req.Key, d.Allowed)
	}
	return all, ok || err != nil, err
}

// traceFresh logs a key started here by the owned path. (Apart, so that
// the trace's arguments do not weigh on owned's frame.)
func (n *Node) traceFresh(key string, allowed bool) {
	n.trace("fresh", "key", key, "allowed", allowed)
}

// chain sends a call made on this node down the chain (route) from at:
// AllowAll's rules are checked before it goes, and its decisions appended
// to dst.
func (n *Node) chain(ctx context.Context, d *ringlimit.Decision, now time.Time, h uint64, at string, req *peer.Request, dst []ringlimit.Decision) (all []ringlimit.Decision, err error) {
	if req.Op != peer.OpAllowAll {
		*d, err = n.route(ctx, now, h, at, *req, nil)
		return nil, err
	}
	for i, r := range req.Rules { // ValidateCall validates each rule too
		if err := ringlimit.ValidateCall(req.Key, r, req.N); err != nil {
			return dst, fmt.Errorf("rules[%d]: %w", i, err)
		}
	}
	x := new(extra)
	if *d, err = n.route(ctx, now, h, at, *req, x); err != nil {
		return dst, err
	}
	if dst == nil {
		return x.all, nil
	}
	return append(dst, x.all...), nil
}

// leased is the one place the leases hook into the chain, after a call
// was decided (d, err): a call a peer decided counts toward a lease of its
// key (sawForward); one decided here that denies hits while leases of the
// key are out recalls them (afterDecision), and reports that the call
// should be decided again: hits came back, or, quick (a call that must
// not wait: see ownerHandler.Serve), the recall is on its way and the
// caller should ask again (recallSoon); a Reset revokes them. A recall is
// waited for until by (zero: recallBy from now, as for a call made here).
func (n *Node) leased(ctx context.Context, req *peer.Request, d *ringlimit.Decision, err error, quick bool, by time.Time) (again bool) {
	if d.Allowed && d.Source == ringlimit.Local {
		return false // (most calls: nothing to do)
	}
	return n.leaseStep(ctx, req, d, err, quick, by)
}

// leaseStep is leased past its common case.
func (n *Node) leaseStep(ctx context.Context, req *peer.Request, d *ringlimit.Decision, err error, quick bool, by time.Time) bool {
	switch {
	case req.Op == peer.OpReset:
		n.recallLeases(ctx, req.Key, true, n.recallOr(by))
		return false
	case err != nil || req.Op != peer.OpAllow || req.N <= 0:
		return false
	case d.Source == ringlimit.Peer:
		n.sawForward(req.Key, req.Rule, req.N)
		return false
	case d.Allowed || d.Source != ringlimit.Local || n.leases.nlent.Load() == 0:
		return false
	case quick:
		return n.recallSoon(req.Key, req.Rule, *d)
	}
	return n.afterDecision(ctx, req.Key, req.Rule, *d, n.recallOr(by))
}

// recallOr is by, or if it is zero recallBy from now for a call made here.
func (n *Node) recallOr(by time.Time) time.Time {
	if by.IsZero() {
		return n.recallBy(time.Now(), false)
	}
	return by
}

// route runs req down the chain, the way groupcache's load does, at the
// instant now (the clock is read once), for the key of hash h: a bounded
// loop asks where the key is decided, starting at at ("" : ask the
// ownership core here): here (the core, then the local store), a peer
// (which may answer that the key is with another member: the loop goes on
// there, with From set), the store, the policy. A call that bounces past
// maxHops between members whose views disagree, or whose member left on
// the way, goes down the chain again from here a moment later, while the
// views settle, for at most rerouteBudget; then the store decides it. For
// OpAllowAll the decisions go to *all (and the first is returned).
func (n *Node) route(ctx context.Context, now time.Time, h uint64, at string, req peer.Request, x *extra) (ringlimit.Decision, error) {
	checked := req.Op != peer.OpAllow // the input of a call that leaves this node is checked first
	start := now                      // (read just now, on the system clock unless Config.Clock)
	if n.cfg.Clock != nil {
		start = time.Now()
	}
	budget := n.rerouteBudget()
	if n.cfg.OwnerWait > 0 {
		budget = n.cfg.OwnerWait
		if dl, ok := ctx.Deadline(); ok {
			budget = time.Until(dl) + time.Since(start) // until the caller's deadline
		}
	}
	for {
		d, done, err := n.hops(ctx, now, h, at, &req, &checked, x, start)
		if done || err != nil {
			return d, err
		}
		if time.Since(start) >= budget || !n.pause(ctx, rerouteDelay) {
			break
		}
		at, now = "", n.now()
		n.stats.reroutes.Add(1)
	}
	if err := validateOnce(&req, &checked); err != nil {
		return ringlimit.Decision{}, err
	}
	if err := ownerWaitEnded(ctx); err != nil && n.cfg.OwnerWait > 0 {
		n.stats.ownerWaitsExpired.Add(1)
		return ringlimit.Decision{}, err // waited for the owner until the caller's end
	}
	return n.fromStore(ctx, &req, x)
}

// ownerWaitEnded is ctx's error, or context.DeadlineExceeded once its
// deadline has passed: the budget runs to the deadline, and on a busy
// machine the context's timer may not have fired yet when it is spent (the
// call then went to the fail-open policy at its deadline instead of
// returning the caller's error).
func ownerWaitEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// hops follows req from at for at most maxHops "moved" answers. done says
// it was decided (or failed); else it goes down the chain again.
func (n *Node) hops(ctx context.Context, now time.Time, h uint64, at string, req *peer.Request, checked *bool, x *extra, start time.Time) (ringlimit.Decision, bool, error) {
	via := "" // the member that answered "moved to" for this call
	for hop := 0; hop <= maxHops; hop++ {
		var (
			d    ringlimit.Decision
			next string
			err  error
		)
		here := at == "" || at == n.name
		if here {
			d, next, err = n.here(ctx, now, h, req, via, false, x)
		} else {
			if err := validateOnce(req, checked); err != nil {
				return ringlimit.Decision{}, true, err
			}
			req.From = via
			d, next, err = n.ask(ctx, at, req, x)
		}
		switch next {
		case "":
			return d, true, err
		case toStore:
			if err := validateOnce(req, checked); err != nil {
				return ringlimit.Decision{}, true, err
			}
			if n.waitsFor(at, here) {
				// OwnerWait: the owner is alive, only slow: ask again.
				return ringlimit.Decision{}, false, nil
			}
			d, err = n.fromStore(ctx, req, x)
			return d, true, err
		case reroute:
			// The member asked left (or is leaving) while the call was on
			// its way: the key has another owner.
			return ringlimit.Decision{}, false, nil
		}
		if here {
			at, via = next, "" // the core sends it there
			continue
		}
		if next == at {
			// The member asked waits for the key's state still: ask it
			// again (not a hop), within the call's budget.
			if time.Since(start) >= n.rerouteBudget() {
				return ringlimit.Decision{}, false, nil
			}
			hop--
			via = at
			continue
		}
		// Moved: the member asked says the key is with next.
		n.stats.redirects.Add(1)
		via, at = at, next
		if next == n.name {
			at = ""
		}
		now = n.now()
	}
	return ringlimit.Decision{}, false, nil
}

// waitsFor reports whether a call that could not be decided by the member
// at (here: this node, waiting for its key's state) goes down the chain
// again rather than to the store: with OwnerWait, while at is alive in this
// node's view and its process is not known to be gone.
func (n *Node) waitsFor(at string, here bool) bool {
	if n.cfg.OwnerWait <= 0 {
		return false
	}
	if here || at == "" || at == n.name {
		return true
	}
	return n.members.Ring().Contains(at) && !n.members.Refusing(at)
}

// rerouteDelay is how long a call waits before it goes down the chain
// again (see route): about a gossip round of the fast preset.
const rerouteDelay = 5 * time.Millisecond

// rerouteBudget bounds how long a call goes down the chain again and again
// before the store decides it.
func (n *Node) rerouteBudget() time.Duration {
	return max(4*n.cfg.ForwardTimeout, 500*time.Millisecond)
}

// pause waits d, or less if ctx ends or the node stops; false if it did not
// wait d.
func (n *Node) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-n.stop:
	}
	return false
}

// validateOnce checks a call's input before it leaves this node (to a peer
// or the store), unless it was checked already. A call decided here is
// checked by the local store instead, once.
func validateOnce(req *peer.Request, checked *bool) error {
	if *checked || req.Op == peer.OpAllowAll { // AllowAll checked its rules before routing
		return nil
	}
	*checked = true
	return ringlimit.ValidateCall(req.Key, req.Rule, req.N)
}

// here asks the ownership core where req is decided, and decides it if
// here: with the core's lock held, so that no hand-over takes the key's
// state out meanwhile. It returns the member the call goes to instead (the
// key's holder, or this node for a forwarded call still waiting: the
// caller asks again), or toStore. While the key's state is on its way
// (pulled from its previous holder, or loaded from the store) the call
// waits for it, at most parkTimeout; via is the member that sent the call
// here with "moved to this node", if any; fwd says the call came from a
// peer. For OpAllowAll the decisions go to *all.
func (n *Node) here(ctx context.Context, now time.Time, h uint64, req *peer.Request, via string, fwd bool, x *extra) (ringlimit.Decision, string, error) {
	o := &n.own
	if via == "" {
		// Most calls while keys change hands are on keys the change does
		// not touch: the core's Peek says so under the read lock, and
		// such calls go on, or are decided, side by side.
		o.mu.RLock()
		if n.local.Has(req.Key) {
			d, err := n.decideLocked(ctx, now, req, x)
			o.mu.RUnlock()
			return d, "", err
		}
		to, ok := o.core.Peek(req.Key, h)
		if ok && to == "" {
			d, err := n.decideLocked(ctx, now, req, x)
			o.mu.RUnlock()
			return d, "", err
		}
		o.mu.RUnlock()
		if ok {
			return ringlimit.Decision{}, to, nil
		}
	}
	var deadline time.Time
	for {
		o.begin()
		has := n.local.Has(req.Key)
		a := o.core.Call(hold.Call{Key: req.Key, Hash: h, Has: has, Forwarded: fwd, Via: via, Now: now.UnixMilli()})
		if n.tracing && (a.Kind != hold.Decide || !has) {
			n.trace("call", "key", req.Key, "has", has, "fwd", fwd, "via", via, "act", a.Kind, "to", a.To)
		}
		switch a.Kind {
		case hold.Decide:
			// (A state held here whose key another member owns is the
			// holder's to decide: the push after a ring change, or the end
			// of its pull, sends it to its owner.)
			d, err := n.decideLocked(ctx, now, req, x)
			o.end()
			return d, "", err
		case hold.Forward, hold.Moved:
			o.end()
			return ringlimit.Decision{}, a.To, nil
		}
		// Pull, Load, or Wait: the key's state is on its way.
		var p *parked
		rq := *req // (a copy for the waiter: the caller's request stays on its stack)
		w := &waiter{req: &rq, x: x}
		if a.Kind != hold.Wait || o.core.Joined() {
			p = o.park(req.Key, w)
		}
		o.end()
		if a.Kind == hold.Pull || a.Kind == hold.Load {
			n.startPull(req.Key, h, a)
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(n.parkTimeout(fwd))
		}
		if !n.await(ctx, p, deadline) && !n.unpark(req.Key, p, w) {
			switch {
			case ctx.Err() != nil:
				return ringlimit.Decision{}, "", ctx.Err()
			case fwd:
				return ringlimit.Decision{}, n.name, nil // still waiting here: the caller asks again
			}
			return ringlimit.Decision{}, toStore, nil
		}
		switch {
		case w.decided:
			return w.d, "", w.err
		case p != nil && p.to != "":
			return ringlimit.Decision{}, p.to, nil
		}
		via, now = "", n.now()
	}
}

// decideLocked decides req from the local store, under the core's lock.
func (n *Node) decideLocked(ctx context.Context, now time.Time, req *peer.Request, x *extra) (ringlimit.Decision, error) {
	switch req.Op {
	case peer.OpReset:
		// (The key's version, if it has one, goes with the next sweep.)
		return ringlimit.Decision{}, n.resetHeld(ctx, req.Key)
	case opReserve:
		return n.reserveLocked(now, req, x.wait)
	case peer.OpAllowAll:
		ds, err := n.local.AllowAllAt(now, req.Key, req.Rules, req.N)
		if err != nil {
			return ringlimit.Decision{}, err
		}
		x.all = ds
		return ds[0], nil
	}
	return n.local.AllowNAt(now, req.Key, req.Rule, req.N)
}

// unpark takes w, which gave up waiting, off p: the pull's end must not
// decide a call whose caller has gone on (to the store, or to ask again).
// It reports whether p was released meanwhile (w's wait is over after all).
func (n *Node) unpark(key string, p *parked, w *waiter) bool {
	if p == nil {
		return false
	}
	o := &n.own
	o.mu.Lock()
	defer o.mu.Unlock()
	select {
	case <-p.done:
		return true
	default:
	}
	p.calls = slices.DeleteFunc(p.calls, func(x *waiter) bool { return x == w })
	return false
}

// await waits until p is released (p nil: until the core decides keys: the node has joined its
// cluster), the deadline passes or ctx ends; false unless released.
func (n *Node) await(ctx context.Context, p *parked, deadline time.Time) bool {
	done := n.deciding
	if p != nil {
		done = p.done
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
	case <-ctx.Done():
	case <-n.stop:
	}
	return false
}

// parkTimeout bounds how long a call waits here for its key's state: a
// forwarded call a third of the forward timeout (it is answered "ask
// again" then, before its caller gives up on this node and sends it to the
// store as well), a call made here twice the forward timeout.
func (n *Node) parkTimeout(fwd bool) time.Duration {
	if fwd {
		return n.cfg.ForwardTimeout / 3
	}
	return 2 * n.cfg.ForwardTimeout
}

// ask forwards req to the member named at. It returns the peer's decision,
// or where the call goes next: the key's holder, the store, or the ring
// again if at left during the call.
func (n *Node) ask(ctx context.Context, at string, req *peer.Request, x *extra) (ringlimit.Decision, string, error) {
	pc := n.peers.get(at)
	if pc == nil && req.From != "" {
		if n.members.Refusing(at) {
			// Redirected to a member this node dropped because its
			// process is gone, by one that has not noticed yet (it
			// drops it on its own next forward there, or when gossip
			// tells): its last written state is in the store. (Going
			// down the chain again would bounce between the two views
			// until gossip caught up, half a second.)
			n.stats.forwardFailures.Add(1)
			return ringlimit.Decision{}, toStore, nil
		}
		// Redirected to a member this node has not heard of yet.
		pc = n.awaitPeer(ctx, at, time.Now().Add(min(n.cfg.ForwardTimeout/3, time.Second)))
	}
	if pc == nil {
		if n.leftOrLeaving(at) {
			n.stats.redirects.Add(1)
			return ringlimit.Decision{}, reroute, nil // the key has another owner now
		}
		n.stats.forwardFailures.Add(1)
		return ringlimit.Decision{}, toStore, nil
	}
	pass, err := pc.breaker.Allow()
	if err != nil {
		if n.leftOrLeaving(at) {
			n.stats.redirects.Add(1)
			return ringlimit.Decision{}, reroute, nil
		}
		n.stats.forwardFailures.Add(1)
		return ringlimit.Decision{}, toStore, nil
	}
	n.stats.forwards.Add(1)
	var res peer.Result
	if req.Op == opReserve {
		res, err = n.askReserve(ctx, pc, at, req, x.wait)
	} else {
		res, err = pc.client.Do(ctx, req)
	}
	switch {
	case err == nil && res.MovedTo != "" && res.Err == nil:
		pass.Done(failover.Success)
		return ringlimit.Decision{}, res.MovedTo, nil
	case err == nil && res.Err == nil && req.Op == peer.OpAllowAll && len(res.Decisions) != len(req.Rules):
		pass.Done(failover.Failure) // an owner that does not speak AllowAll: the store decides
		n.stats.forwardFailures.Add(1)
		return ringlimit.Decision{}, toStore, nil
	case err == nil && res.Err == nil:
		pass.Done(failover.Success)
		res.Decision.Source = ringlimit.Peer
		if req.Op == peer.OpAllowAll {
			for i := range res.Decisions {
				res.Decisions[i].Source = ringlimit.Peer
			}
			x.all = res.Decisions
		}
		return res.Decision, "", nil
	case ctx.Err() != nil:
		pass.Done(failover.Ignored) // the caller gave up: not the peer's fault
		return ringlimit.Decision{}, "", ctx.Err()
	case err == nil && isBadInput(res.Err):
		// The owner refused the input. We validated it, so the two
		// versions disagree: trust the owner.
		pass.Done(failover.Success)
		return ringlimit.Decision{}, "", res.Err
	case err == nil && errors.Is(res.Err, ringlimit.ErrWaitTooLong):
		pass.Done(failover.Success) // an answer: the wait would outlast the caller's deadline
		return ringlimit.Decision{}, "", res.Err
	}
	pass.Done(failover.Failure) // unreachable, timed out, or closing
	if n.peers.current(at) != pc || n.leftOrLeaving(at) {
		// It left or is leaving, or came back at another address, while
		// the call was on its way (its connection was dropped): the key
		// may have a new owner.
		n.stats.redirects.Add(1)
		return ringlimit.Decision{}, reroute, nil
	}
	n.stats.forwardFailures.Add(1)
	return ringlimit.Decision{}, toStore, nil
}

// leftOrLeaving reports whether the member at, which this node could not
// ask, is off the ring or leaving: the call goes down the chain again, to
// the key's next owner, rather than to the store. A leaver announced its
// leave after it handed its keys' states to their next owners (those a push
// could not deliver go to the store as it closes), so they decide exactly,
// while the store's copy may be older; and with no store the call would
// fail open. (A leaver stops answering once its peers have been quiet for
// a moment: a caller whose gossip had not yet dropped it, on a busy host,
// met its closed port, and a rolling restart admitted 101 of 100.) Its
// view drops the leaver at once, as on a refused push (see leaves), unless
// this node leaves too.
func (n *Node) leftOrLeaving(at string) bool {
	if !n.members.Ring().Contains(at) {
		return true
	}
	leaving := n.members.Leaving
	if h := n.leavingHook.Load(); h != nil {
		leaving = *h
	}
	inc, ok := leaving(at)
	if !ok {
		return false
	}
	o := &n.own
	o.mu.RLock()
	known, self := o.leavers[at] == inc, o.core.Leaving()
	o.mu.RUnlock()
	if self {
		// This node leaves too: its view stays, or two leavers that drop
		// each other both hand their keys to nobody and decide them as
		// the last member (the simulator found it, 14 of 7: seeds 2177
		// and 23872 replay it).
		return false
	}
	if !known {
		n.leaves(at, inc)
	}
	return true
}

func (n *Node) fromStore(ctx context.Context, req *peer.Request, x *extra) (ringlimit.Decision, error) {
	if req.Op == opReserve {
		x.wait.store = true // (WaitN hands the whole wait to the store tier)
		return ringlimit.Decision{}, nil
	}
	if req.Op == peer.OpReset {
		return ringlimit.Decision{}, n.store.Reset(ctx, req.Key)
	}
	if req.Op == peer.OpAllowAll {
		return n.storeAll(ctx, req, x)
	}
	return n.store.AllowN(ctx, req.Key, req.Rule, req.N)
}

// Allow is shorthand for AllowN(ctx, key, rule, 1).
func (n *Node) Allow(ctx context.Context, key string, rule ringlimit.Rule) (d ringlimit.Decision, err error) {
	_, err = n.call(ctx, &d, &peer.Request{Op: peer.OpAllow, Key: key, Rule: rule, N: 1}, nil) // (AllowN's line, so that it inlines)
	return d, err
}

// Peek reports whether one hit on key would be admitted now, and consumes
// nothing. It is shorthand for AllowN(ctx, key, rule, 0).
func (n *Node) Peek(ctx context.Context, key string, rule ringlimit.Rule) (d ringlimit.Decision, err error) {
	_, err = n.call(ctx, &d, &peer.Request{Op: peer.OpAllow, Key: key, Rule: rule}, nil) // (AllowN's line, so that it inlines)
	return d, err
}

// Reset forgets key at its holder (and in the store, if the holder cannot
// be reached).
func (n *Node) Reset(ctx context.Context, key string) error {
	if n.closed.Load() {
		return ringlimit.ErrClosed
	}
	if err := ringlimit.ValidateKey(key); err != nil {
		return err
	}
	n.dropLease(key)
	req := peer.Request{Op: peer.OpReset, Key: key}
	d, err := n.route(ctx, n.now(), ring.Hash(key), "", req, nil)
	n.leased(ctx, &req, &d, err, false, time.Time{}) // (if this node decided it: the leases it gave are void)
	return err
}

// ownerHandler serves forwarded calls from this node's own state: one hop,
// never forwarded again, whatever this node's view of the ring. A key this
// node gave away is answered with its holder, and decides nothing here.
// It also serves the hand-off messages (OpStates: see holdwire.go).
type ownerHandler struct{ n *Node }

func (h ownerHandler) Serve(ctx context.Context, r *peer.Request) peer.Result {
	n := h.n
	switch r.Op {
	case peer.OpTake:
		return peer.Result{} // (the release before the core's pull: nothing here for it)
	case peer.OpStates:
		switch {
		case isWait(r.States):
			return n.serveWait(ctx, r.States)
		case isGive(r.States): // reserve.go
			return n.serveGive(r.States)
		case isLease(r.States):
			return n.serveLease(r.States)
		}
		return n.serveHold(r.States)
	}
	hh, now := ring.Hash(r.Key), n.now()
	if n.closed.Load() {
		// Closed, its states handed off: the key is with its owner in the
		// ring without this node, while the listener still answers.
		n.own.mu.Lock()
		to := n.own.core.Owner(hh)
		n.own.mu.Unlock()
		if to == "" || to == n.name {
			return peer.Result{Err: ringlimit.ErrClosed}
		}
		return peer.Result{MovedTo: to}
	}
	n.stats.served.Add(1)
	// Leases of the key out when a call is denied are recalled first, and
	// the call decided again if hits came back (leased). A call its
	// caller sent here first (From "") may be served on the connection's
	// reader (Quick), where every later call from that peer waits behind
	// it: it never waits on a recall, but sends it on its way and answers
	// "ask again". The caller's next ask names this node (From), is served
	// on a worker, and waits for that recall until by. (Four callers a
	// node on one connection, each denial waiting for its recall on the
	// reader in turn: the last ones waited past their callers' timeouts,
	// and in CI twelve such calls were decided by the fail-open policy.)
	quick := r.From == "" && r.Op != peer.OpReset // (a reset is never Quick: it waits for the revokes, on a worker)
	var by time.Time                              // (quick: none, the recall is not waited for)
	if !quick {
		by = n.recallBy(time.Now(), true)
	}
	var (
		d    ringlimit.Decision
		all  []ringlimit.Decision // AllowAll's
		x    *extra
		next string
		err  error
		done bool
	)
	if g := n.own.gen.Load(); quick && n.own.view.Load().OwnerOfHash(hh) == n.name {
		// Owned: the owned path, as for a call made here. (Served on the
		// connection's reader, every call from that peer waits behind it:
		// the core's read lock and a second lookup took a third off the
		// forwarding throughput of 32 callers.)
		all, done, err = n.owned(&d, nil, now, hh, r, g)
	}
	if !done {
		if r.Op == peer.OpAllowAll {
			x = new(extra) // (its decisions)
		}
		d, next, err = n.here(ctx, now, hh, r, r.From, true, x)
	}
	if next == "" && n.leased(ctx, r, &d, err, quick, by) {
		if quick {
			return peer.Result{MovedTo: n.name}
		}
		d, next, err = n.here(ctx, n.now(), hh, r, r.From, true, x) // hits came back: decide it again
	}
	if x != nil {
		all = x.all
	}
	switch next {
	case "":
		return peer.Result{Decision: d, Decisions: all, Err: err}
	case toStore:
		return peer.Result{Err: ringlimit.ErrClosed} // nobody to send it to: the caller falls back to the store
	}
	return peer.Result{MovedTo: next}
}

// isBadInput reports whether an owner's error is about the input, which the
// caller must see, rather than about the owner (closing, failing), which
// sends the call on to the store.
func isBadInput(err error) bool {
	return errors.Is(err, ringlimit.ErrInvalidKey) || errors.Is(err, ringlimit.ErrInvalidRule) ||
		errors.Is(err, ringlimit.ErrInvalidHits)
}
