package node

import (
	"context"
	"errors"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/node/peer"
)

// AllowN consumes n hits on key if rule admits them now; n == 0 is a Peek.
//
// The owner decides: this node from its memory if it owns key (Source
// Local); else the owning peer, over its connection (Source Peer); if the
// peer cannot answer within ForwardTimeout or its breaker is open, the
// central store (Source Store); if that cannot answer either, Policy (Source
// Fallback). Errors: bad input, a closed node, a cancelled context.
func (n *Node) AllowN(ctx context.Context, key string, rule ringlimit.Rule, hits int64) (ringlimit.Decision, error) {
	if n.closed.Load() {
		return ringlimit.Decision{}, ringlimit.ErrClosed
	}
	if err := ringlimit.ValidateCall(key, rule, hits); err != nil {
		return ringlimit.Decision{}, err
	}
	owner := n.members.Ring().Owner(key)
	if owner == n.name || owner == "" {
		d, err := n.local.AllowN(ctx, key, rule, hits)
		n.stats.decided(ringlimit.Local)
		return d, err
	}
	return n.forward(ctx, owner, &peer.Request{Op: peer.OpAllow, Key: key, Rule: rule, N: hits})
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
	if owner == n.name || owner == "" {
		return n.local.Reset(ctx, key)
	}
	_, err := n.forward(ctx, owner, &peer.Request{Op: peer.OpReset, Key: key})
	return err
}

// forward asks the owner, then the store.
func (n *Node) forward(ctx context.Context, owner string, req *peer.Request) (ringlimit.Decision, error) {
	if pc := n.peers.get(owner); pc != nil {
		if done, err := pc.breaker.Allow(); err == nil {
			n.stats.forwards.Add(1)
			res, err := pc.client.Do(ctx, req)
			switch {
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
// never forwarded again, whatever this node's view of the ring.
type ownerHandler struct{ n *Node }

func (h ownerHandler) Serve(ctx context.Context, r *peer.Request) peer.Result {
	if h.n.closed.Load() {
		return peer.Result{Err: ringlimit.ErrClosed}
	}
	h.n.stats.served.Add(1)
	if r.Op == peer.OpReset {
		return peer.Result{Err: h.n.local.Reset(ctx, r.Key)}
	}
	d, err := h.n.local.AllowN(ctx, r.Key, r.Rule, r.N)
	return peer.Result{Decision: d, Err: err}
}

// isBadInput reports whether an owner's error is about the input, which the
// caller must see, rather than about the owner (closing, failing), which
// sends the call on to the store.
func isBadInput(err error) bool {
	return errors.Is(err, ringlimit.ErrInvalidKey) || errors.Is(err, ringlimit.ErrInvalidRule) ||
		errors.Is(err, ringlimit.ErrInvalidHits)
}
