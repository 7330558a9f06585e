package node

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/ring"
)

// Waiting for a turn (ringlimit.Waiter): the key's holder reserves the hits
// (internal/memstore's ReserveN: a bucket takes them at once and says when
// they act; a window or a log says when to ask again) and the caller
// sleeps here until then, on one timer. A reservation travels down the
// routing chain as a call does (route.go): decided here if this node holds
// the key, else by the holder, asked over the peer link in one round trip
// (waitwire.go), redirects and hand-offs included.

// Node-internal ops of the routing chain: never on the wire as such (a
// reservation travels as a wait message, see waitwire.go).
const (
	opReserve peer.Op = 200 + iota // reserve req.N hits for a waiter (extra.wait)
)

// extra is what a call carries down the chain besides its Request: what
// AllowAll returns, and a reservation's in and out.
type extra struct {
	all  []ringlimit.Decision // OpAllowAll: the decisions (the first is returned)
	wait *waitCall            // opReserve
}

// waitCall is one reservation.
type waitCall struct {
	by     time.Time       // in: the latest instant the hits may act at, on the node's clock (zero: none)
	wait   time.Duration   // out: how long until they act, or until to ask again (Decision not Allowed)
	ticket memstore.Ticket // out: what a cancel gives back (zero Act: nothing)
	holder string          // out: the member that reserved ("" this node)
	store  bool            // out: no holder could be reached: the store tier waits instead
}

var _ ringlimit.Waiter = (*Node)(nil)

// Wait is shorthand for WaitN(ctx, key, rule, 1).
func (n *Node) Wait(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return n.WaitN(ctx, key, rule, 1)
}

// WaitN blocks until n hits of key under rule can be admitted, consumes
// them and returns the admitting Decision (see ringlimit.Waiter).
//
// The key's holder reserves them: this node, for a key it holds, or the
// holder over the peer link, in one round trip. A token or leaky bucket
// takes the hits at once (they are the holder's to count from then on,
// whatever happens to the key's ownership) and says when they act; WaitN
// sleeps until then. A window or a log reserves nothing: it says when it
// would admit them, and WaitN sleeps and asks again then. A waiter whose
// ctx ends first gives a bucket's hits back to the holder that reserved
// them (one more round trip if it is a peer; nothing comes back if the key
// has moved since). When no holder can be reached, the store tier waits
// instead (failover's WaitN: a reservation in the store, or the policy),
// as AllowN's calls go to it.
//
// Bad input (n above the rule's capacity: ErrInvalidHits) and a wait that
// would outlast ctx's deadline (ringlimit.ErrWaitTooLong) return an error
// at once and consume nothing; an ended ctx returns an error wrapping
// ctx.Err(). n == 0 waits for nothing and returns a Peek's Decision.
func (n *Node) WaitN(ctx context.Context, key string, rule ringlimit.Rule, hits int64) (ringlimit.Decision, error) {
	if n.closed.Load() {
		return ringlimit.Decision{}, ringlimit.ErrClosed
	}
	if err := ringlimit.ValidateCall(key, rule, hits); err != nil {
		return ringlimit.Decision{}, err
	}
	if hits == 0 {
		return n.AllowN(ctx, key, rule, 0)
	}
	h := ring.Hash(key)
	for {
		if err := ctx.Err(); err != nil {
			return ringlimit.Decision{}, fmt.Errorf("node: wait on %s: %w", strconv.Quote(key), err)
		}
		w, now := &waitCall{}, n.now()
		if dl, ok := ctx.Deadline(); ok {
			w.by = now.Add(time.Until(dl)) // (the node's clock may not be the system's)
		}
		d, err := n.route(ctx, now, h, "", peer.Request{Op: opReserve, Key: key, Rule: rule, N: hits}, &extra{wait: w})
		if err != nil {
			return ringlimit.Decision{}, err
		}
		if w.store {
			return n.store.WaitN(ctx, key, rule, hits)
		}
		if d.Allowed && w.wait <= 0 {
			return d, nil
		}
		asked := time.Now()
		t := time.NewTimer(w.wait)
		select {
		case <-t.C:
			if d.Allowed {
				return d, nil
			}
			continue // a window or a log: ask again
		case <-ctx.Done():
			t.Stop()
		case <-n.stop:
			t.Stop()
		}
		if d.Allowed && time.Since(asked) >= w.wait {
			return d, nil // the timer and ctx came together: the turn is here
		}
		if d.Allowed && w.ticket.Act != 0 || !d.Allowed && w.ticket.T > 0 {
			n.cancelWait(ctx, key, rule, w) // (a window waiter's leaves the key's queue at its holder)
		}
		if ctx.Err() == nil {
			return ringlimit.Decision{}, ringlimit.ErrClosed
		}
		return ringlimit.Decision{}, fmt.Errorf("node: wait on %s: %w", strconv.Quote(key), ctx.Err())
	}
}

// cancelWait gives back the hits of a waiter that gave up, to the member
// that reserved them (best effort: one that does not answer keeps them).
func (n *Node) cancelWait(ctx context.Context, key string, rule ringlimit.Rule, w *waitCall) {
	if w.holder == "" {
		n.cancelHere(key, rule, w.ticket)
		return
	}
	pc := n.peers.get(w.holder)
	if pc == nil {
		return
	}
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), pc.client.timeout())
	defer stop()
	_, _ = pc.client.Do(cctx, waitCancelRequest(key, rule, w.ticket))
}

// cancelHere gives back the hits of a reservation made here, if the key's
// state is still the one they were reserved in (a state that left took
// them with it; one reset or started afresh since never held them): else
// the cancel is dropped, and counted (Stats.Local.StaleCancels).
func (n *Node) cancelHere(key string, rule ringlimit.Rule, tk memstore.Ticket) {
	o := &n.own
	o.mu.RLock()
	defer o.mu.RUnlock()
	n.local.CancelTicket(n.now(), key, rule, tk)
}

// reserveLocked reserves req's hits for a waiter, as decideLocked decides a
// call.
func (n *Node) reserveLocked(now time.Time, req *peer.Request, w *waitCall) (ringlimit.Decision, error) {
	r, err := n.local.ReserveN(now, req.Key, req.Rule, req.N, w.by)
	w.wait, w.ticket = r.At.Sub(now), r.Ticket()
	return r.Decision, err
}
