package node

import (
	"context"
	"errors"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/local"
)

// AllowN consumes n hits on key if rule admits them now; n == 0 is a Peek.
//
// The owner decides: this node from its memory if it owns key (Source
// Local); else the owning peer, over its connection (Source Peer); if the
// peer cannot answer within ForwardTimeout or its breaker is open, the
// central store (Source Store); if that cannot answer either, Policy (Source
// Fallback). While ownership changes, a key's state follows it (see Close
// and Config.HandoffWindow): a node that gave a key up redirects its calls
// to the new holder, once, and a new owner takes the state from the
// previous one before it decides. Errors: bad input, a closed node, a
// cancelled context.
func (n *Node) AllowN(ctx context.Context, key string, rule ringlimit.Rule, hits int64) (ringlimit.Decision, error) {
	if n.closed.Load() {
		return ringlimit.Decision{}, ringlimit.ErrClosed
	}
	if err := ringlimit.ValidateCall(key, rule, hits); err != nil {
		return ringlimit.Decision{}, err
	}
	if n.mode.Load() != 0 {
		return n.allowChanging(ctx, &peer.Request{Op: peer.OpAllow, Key: key, Rule: rule, N: hits})
	}
	owner := n.members.Ring().Owner(key)
	if owner == n.name || owner == "" {
		d, err := n.local.AllowN(ctx, key, rule, hits)
		if errors.Is(err, local.ErrMoved) {
			return n.decideHere(ctx, &peer.Request{Op: peer.OpAllow, Key: key, Rule: rule, N: hits}, 0)
		}
		n.stats.decided(ringlimit.Local)
		return d, err
	}
	return n.forward(ctx, owner, &peer.Request{Op: peer.OpAllow, Key: key, Rule: rule, N: hits}, 0)
}

// route sends req where it belongs now: after a forward to a member that
// left meanwhile.
func (n *Node) route(ctx context.Context, req *peer.Request, hops int) (ringlimit.Decision, error) {
	if n.closed.Load() {
		return ringlimit.Decision{}, ringlimit.ErrClosed
	}
	owner := n.members.Ring().Owner(req.Key)
	if n.mode.Load()&modeLeaving != 0 || owner == n.name || owner == "" {
		if req.Op == peer.OpReset {
			return ringlimit.Decision{}, n.local.Reset(ctx, req.Key)
		}
		n.ensureState(ctx, req.Key, "")
		return n.decideHere(ctx, req, hops)
	}
	return n.forward(ctx, owner, req, hops)
}

// allowChanging is AllowN while this node leaves or within the hand-off
// window.
func (n *Node) allowChanging(ctx context.Context, req *peer.Request) (ringlimit.Decision, error) {
	if n.mode.Load()&modeLeaving != 0 {
		to := n.movedTarget(req.Key)
		if to == "" || to == n.name { // the last member: nobody to hand off to
			return n.fromStore(ctx, req)
		}
		r := *req
		r.From = n.name
		return n.forward(ctx, to, &r, 1)
	}
	owner := n.members.Ring().Owner(req.Key)
	if owner != n.name && owner != "" {
		return n.forward(ctx, owner, req, 0)
	}
	n.ensureState(ctx, req.Key, "")
	return n.decideHere(ctx, req, 0)
}

// decideHere decides req from this node's state, or, if this node gave the
// key up, sends it on to the key's new holder.
func (n *Node) decideHere(ctx context.Context, req *peer.Request, hops int) (ringlimit.Decision, error) {
	d, err := n.local.AllowN(ctx, req.Key, req.Rule, req.N)
	if errors.Is(err, local.ErrMoved) {
		to := n.movedTarget(req.Key)
		if to == "" && hops < maxRedirects && n.reclaim(req.Key) {
			n.ensureState(ctx, req.Key, "")
			return n.decideHere(ctx, req, hops+1)
		}
		if to == "" || to == n.name || hops >= maxRedirects {
			return n.fromStore(ctx, req)
		}
		n.stats.redirects.Add(1)
		r := *req
		r.From = n.name
		return n.forward(ctx, to, &r, hops+1)
	}
	if err == nil {
		n.stats.decided(ringlimit.Local)
	}
	return d, err
}

// Allow is shorthand for AllowN(ctx, key, rule, 1).
func (n *Node) Allow(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return n.AllowN(ctx, key, rule, 1)
}

// Peek reports whether one hit on key would be admitted now, and consumes
// nothing. It is shorthand for AllowN(ctx, key, rule, 0).
func (n *Node) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return n.AllowN(ctx, key, rule, 0)
}

// Reset forgets key at its owner (and in the store, if the owner cannot be
// reached).
func (n *Node) Reset(ctx context.Context, key string) error {
	if n.closed.Load() {
		return ringlimit.ErrClosed
	}
	if err := ringlimit.ValidateKey(key); err != nil {
		return err
	}
	owner := n.members.Ring().Owner(key)
	if to := n.movedTarget(key); to != "" && to != n.name {
		owner = to
	}
	if owner == n.name || owner == "" {
		return n.local.Reset(ctx, key)
	}
	_, err := n.forward(ctx, owner, &peer.Request{Op: peer.OpReset, Key: key}, 0)
	return err
}

// forward asks the owner, then the store. An owner that gave the key up
// names its new holder, and the call goes on there (hops counts those
// redirects; a decision is still made once, by one holder).
func (n *Node) forward(ctx context.Context, owner string, req *peer.Request, hops int) (ringlimit.Decision, error) {
	pc := n.peers.get(owner)
	if pc == nil && req.From != "" {
		pc = n.awaitPeer(ctx, owner) // redirected to a member this node has not heard of yet
	}
	if pc != nil {
		if done, err := pc.breaker.Allow(); err == nil {
			n.stats.forwards.Add(1)
			res, err := pc.client.Do(ctx, req)
			switch {
			case err == nil && res.MovedTo != "" && res.Err == nil:
				done(failover.Success)
				if hops >= maxRedirects {
					return n.fromStore(ctx, req)
				}
				n.stats.redirects.Add(1)
				r := *req
				r.From = owner
				if res.MovedTo == n.name {
					n.takeBack(r.Key, owner)
					n.ensureState(ctx, r.Key, owner)
					return n.decideHere(ctx, &r, hops+1)
				}
				return n.forward(ctx, res.MovedTo, &r, hops+1)
			case err == nil && res.Err == nil:
				done(failover.Success)
				res.Decision.Source = ringlimit.Peer
				n.stats.decided(ringlimit.Peer)
				return res.Decision, nil
			case ctx.Err() != nil:
				done(failover.Ignored) // the caller gave up: not the peer's fault
				return ringlimit.Decision{}, ctx.Err()
			case err == nil && isBadInput(res.Err):
				// The owner refused the input. We validated it, so the two
				// versions disagree: trust the owner.
				done(failover.Success)
				return ringlimit.Decision{}, res.Err
			default: // unreachable, timed out, or closing
				done(failover.Failure)
				if hops < maxRedirects && n.peers.current(owner) != pc {
					// It left, or came back at another address, while
					// the call was on its way (its connection was
					// dropped): the key may have a new owner.
					n.stats.redirects.Add(1)
					return n.route(ctx, req, hops+1)
				}
			}
		}
		n.stats.forwardFailures.Add(1)
	}
	return n.fromStore(ctx, req)
}

func (n *Node) fromStore(ctx context.Context, req *peer.Request) (ringlimit.Decision, error) {
	if req.Op == peer.OpReset {
		return ringlimit.Decision{}, n.store.Reset(ctx, req.Key)
	}
	d, err := n.store.AllowN(ctx, req.Key, req.Rule, req.N)
	if err == nil {
		n.stats.decided(d.Source)
	}
	return d, err
}

// ownerHandler serves forwarded calls from this node's own state: one hop,
// never forwarded again, whatever this node's view of the ring. A key this
// node gave up is answered with its new holder, and decides nothing here.
// It also serves the hand-off steps.
type ownerHandler struct{ n *Node }

func (h ownerHandler) Serve(ctx context.Context, r *peer.Request) peer.Result {
	n := h.n
	switch r.Op {
	case peer.OpTake:
		return n.serveTake(r.Key, r.From)
	case peer.OpStates:
		return n.serveStates(r.States)
	}
	if n.closed.Load() {
		return peer.Result{Err: ringlimit.ErrClosed}
	}
	n.stats.served.Add(1)
	if r.From != "" || n.mode.Load() != 0 {
		n.takeBack(r.Key, r.From)
		if to := n.movedTarget(r.Key); to != "" && to != n.name {
			return peer.Result{MovedTo: to}
		}
		if r.Op == peer.OpAllow {
			n.ensureState(ctx, r.Key, r.From)
		}
	}
	if r.Op == peer.OpReset {
		return peer.Result{Err: n.local.Reset(ctx, r.Key)}
	}
	d, err := n.local.AllowN(ctx, r.Key, r.Rule, r.N)
	if errors.Is(err, local.ErrMoved) {
		to := n.movedTarget(r.Key)
		if to == "" && n.reclaim(r.Key) {
			n.ensureState(ctx, r.Key, r.From)
			d, err = n.local.AllowN(ctx, r.Key, r.Rule, r.N)
			to = n.movedTarget(r.Key)
		}
		if err == nil {
			return peer.Result{Decision: d}
		}
		if to != "" && to != n.name {
			return peer.Result{MovedTo: to}
		}
		return peer.Result{Err: ringlimit.ErrClosed} // nobody to send it to: the caller falls back to the store
	}
	return peer.Result{Decision: d, Err: err}
}

// isBadInput reports whether an owner's error is about the input, which the
// caller must see, rather than about the owner (closing, failing), which
// sends the call on to the store.
func isBadInput(err error) bool {
	return errors.Is(err, ringlimit.ErrInvalidKey) || errors.Is(err, ringlimit.ErrInvalidRule) ||
		errors.Is(err, ringlimit.ErrInvalidHits)
}
