package node

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
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
// The owner decides: this node from its memory if it owns key (Source
// Local); else the owning peer, over its connection (Source Peer); if the
// peer cannot answer within ForwardTimeout or its breaker is open, the
// central store (Source Store); if that cannot answer either, Policy (Source
// Fallback). While ownership changes, a key's state follows it (see Close
// and Config.HandoffWindow): a node that gave a key up redirects its calls
// to the new holder, and a new owner takes the state from the previous one
// before it decides. Errors: bad input, a closed node, a cancelled context.
func (n *Node) AllowN(ctx context.Context, key string, rule ringlimit.Rule, hits int64) (d ringlimit.Decision, err error) {
	var start time.Time
	if n.obs.on.Load() { // metrics: time a sample (observe.go)
		start = n.obs.start()
	}
	if n.closed.Load() {
		return ringlimit.Decision{}, ringlimit.ErrClosed
	}
	if uint(len(key)-1) >= ringlimit.MaxKeyLen { // empty (wraps round) or too long
		return ringlimit.Decision{}, ringlimit.ValidateKey(key)
	}
	// The rule and hits are checked once, where the call is decided: by
	// the local store on the owned path (it keeps the last rule it checked
	// per shard), by ValidateCall before the call leaves this node.
	now, h, r := n.now(), ring.Hash(key), n.members.Ring()
	at := r.OwnerOfHash(h)
	if at == n.name && n.holders.leaving.Load() == nil {
		// Here, and the key's state is here or no key changes hands (the
		// common case): the local store decides, under its own lock alone
		// (see holders.quiet).
		var ok bool
		// No stray check (see moves): a state started here on a snapshot
		// the ring has moved past was started before the change opened the
		// hand-off window (quiet says no after), so before the change's push,
		// which takes it with the arcs lost.
		if ok, err = n.local.AllowNIfAt(&d, now, key, h, rule, hits, n.quiet); ok || err != nil {
			n.observe(ctx, start, &d, &err)
			return
		}
	}
	d, err = n.route(ctx, now, r, at, peer.Request{Op: peer.OpAllow, Key: key, Rule: rule, N: hits}, nil)
	n.observe(ctx, start, &d, &err)
	return
}

// route runs req down the chain, the way groupcache's load does, at the
// instant now (the clock is read once) from at, the key's owner in one
// snapshot of the ring: a bounded loop asks where the key is decided: here
// (holders, then the local store), a peer (which may name the key's new
// holder: the loop goes on there, with From set), the store, the policy.
// The ring is read again only if the member it named left while the call
// was on its way. For OpAllowAll the decisions go to *all (and the first is
// returned).
func (n *Node) route(ctx context.Context, now time.Time, r *ring.Ring, at string, req peer.Request, all *[]ringlimit.Decision) (ringlimit.Decision, error) {
	checked := req.Op != peer.OpAllow // the input of a call that leaves this node is checked first
	for range maxRedirects + 1 {
		var (
			d    ringlimit.Decision
			next string
			err  error
		)
		if at == n.name || at == "" {
			d, next, err = n.decideHereAll(ctx, &req, now, all)
			if next == "" && err == nil {
				n.strayIfMoved(r, req.Key) // (see moves)
			}
		} else {
			if err := validateOnce(&req, &checked); err != nil {
				return ringlimit.Decision{}, err
			}
			d, next, err = n.ask(ctx, at, &req, all)
		}
		switch next {
		case "":
			return d, err
		case toStore:
			if err := validateOnce(&req, &checked); err != nil {
				return ringlimit.Decision{}, err
			}
			return n.fromStore(ctx, &req, all)
		case reroute:
			r = n.members.Ring()
			at, req.From = r.Owner(req.Key), ""
		default: // moved: the member that answered (or this node) gave the key to next
			n.stats.redirects.Add(1)
			if at == "" {
				at = n.name
			}
			req.From, at = at, next
		}
	}
	if err := validateOnce(&req, &checked); err != nil {
		return ringlimit.Decision{}, err
	}
	return n.fromStore(ctx, &req, all)
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

// holderPicker is what the chain asks about a key while ownership changes:
// which member holds its state now, the way groupcache's PickPeer says
// which peer owns a key. *holders implements it.
type holderPicker interface {
	// pickHolder locks key against hand-over and returns the member its
	// state is with: to ("" if here; toStore if nobody can take it), the
	// stripe unlocked. If here, the stripe stays locked for the decision;
	// settled says it needs no pull first, and src (if not "") is the
	// member its state may still be with.
	pickHolder(key, from string) (s *holderStripe, to, src string, settled bool)
}

var _ holderPicker = (*holders)(nil)

// decideHereAll decides req on this node if it holds the key, making sure
// first, while ownership changes, that the key's state is here; else it
// returns the member that holds the key (or toStore if there is none). For
// OpAllowAll the decisions go to *all.
func (n *Node) decideHereAll(ctx context.Context, req *peer.Request, now time.Time, all *[]ringlimit.Decision) (ringlimit.Decision, string, error) {
	for attempt := 0; ; attempt++ {
		s, to, src, settled := n.holders.pickHolder(req.Key, req.From)
		if to != "" {
			return ringlimit.Decision{}, to, nil
		}
		if req.Op == peer.OpReset {
			err := n.local.Reset(ctx, req.Key)
			s.unlock()
			return ringlimit.Decision{}, "", err
		}
		if req.Op == peer.OpAllowAll {
			d, held, err := n.decideAll(req, now, attempt > 0 || settled, all)
			s.unlock()
			if held || err != nil {
				return d, "", err
			}
		} else {
			if attempt > 0 || settled {
				// Settled here: decide.
				d, err := n.local.AllowNAt(now, req.Key, req.Rule, req.N)
				s.unlock()
				return d, "", err
			}
			d, held, err := n.local.AllowNHeldAt(now, req.Key, req.Rule, req.N)
			s.unlock()
			if held || err != nil {
				return d, "", err
			}
		}
		var err error
		// The state may be elsewhere: fetch it, then decide.
		to, err = n.fetch(ctx, req.Key, src)
		if to != "" || err != nil {
			return ringlimit.Decision{}, to, err
		}
	}
}

// ask forwards req to the member named at. It returns the peer's decision,
// or where the call goes next: the key's new holder, the store, or the ring
// again if at left during the call.
func (n *Node) ask(ctx context.Context, at string, req *peer.Request, all *[]ringlimit.Decision) (ringlimit.Decision, string, error) {
	pc := n.peers.get(at)
	if pc == nil && req.From != "" {
		// Redirected to a member this node has not heard of yet.
		pc = n.awaitPeer(ctx, at, time.Now().Add(min(n.pullTimeout(), time.Second)))
	}
	if pc == nil {
		n.stats.forwardFailures.Add(1)
		return ringlimit.Decision{}, toStore, nil
	}
	done, err := pc.breaker.Allow()
	if err != nil {
		n.stats.forwardFailures.Add(1)
		return ringlimit.Decision{}, toStore, nil
	}
	n.stats.forwards.Add(1)
	res, err := pc.client.Do(ctx, req)
	switch {
	case err == nil && res.MovedTo != "" && res.Err == nil:
		done(failover.Success)
		return ringlimit.Decision{}, res.MovedTo, nil
	case err == nil && res.Err == nil && req.Op == peer.OpAllowAll && len(res.Decisions) != len(req.Rules):
		done(failover.Failure) // an owner that does not speak AllowAll: the store decides
		n.stats.forwardFailures.Add(1)
		return ringlimit.Decision{}, toStore, nil
	case err == nil && res.Err == nil:
		done(failover.Success)
		res.Decision.Source = ringlimit.Peer
		if all != nil {
			for i := range res.Decisions {
				res.Decisions[i].Source = ringlimit.Peer
			}
			*all = res.Decisions
		}
		return res.Decision, "", nil
	case ctx.Err() != nil:
		done(failover.Ignored) // the caller gave up: not the peer's fault
		return ringlimit.Decision{}, "", ctx.Err()
	case err == nil && isBadInput(res.Err):
		// The owner refused the input. We validated it, so the two
		// versions disagree: trust the owner.
		done(failover.Success)
		return ringlimit.Decision{}, "", res.Err
	}
	done(failover.Failure) // unreachable, timed out, or closing
	if n.peers.current(at) != pc {
		// It left, or came back at another address, while the call was
		// on its way (its connection was dropped): the key may have a new
		// owner.
		n.stats.redirects.Add(1)
		return ringlimit.Decision{}, reroute, nil
	}
	n.stats.forwardFailures.Add(1)
	return ringlimit.Decision{}, toStore, nil
}

func (n *Node) fromStore(ctx context.Context, req *peer.Request, all *[]ringlimit.Decision) (ringlimit.Decision, error) {
	if req.Op == peer.OpReset {
		return ringlimit.Decision{}, n.store.Reset(ctx, req.Key)
	}
	if req.Op == peer.OpAllowAll {
		return n.storeAll(ctx, req, all)
	}
	return n.store.AllowN(ctx, req.Key, req.Rule, req.N)
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

// Reset forgets key at its holder (and in the store, if the holder cannot
// be reached).
func (n *Node) Reset(ctx context.Context, key string) error {
	if n.closed.Load() {
		return ringlimit.ErrClosed
	}
	if err := ringlimit.ValidateKey(key); err != nil {
		return err
	}
	r := n.members.Ring()
	_, err := n.route(ctx, n.now(), r, r.Owner(key), peer.Request{Op: peer.OpReset, Key: key}, nil)
	return err
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
	var ds []ringlimit.Decision
	d, next, err := n.decideHereAll(ctx, r, n.now(), &ds)
	switch next {
	case "":
		if err == nil {
			// The caller's ring may not be this node's (see moves).
			n.strayIfNotMine(n.members.Ring(), r.Key)
		}
		return peer.Result{Decision: d, Decisions: ds, Err: err}
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
