package node

import (
	"context"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/hold"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/ring"
)

// Crash stops n as a crash would: no hand-off and no Leave, the listeners
// gone, every goroutine stopped. Close after it does nothing. Only tests see
// it.
func Crash(n *Node) {
	n.closeOnce.Do(func() {
		n.closed.Store(true)
		n.members.Shutdown()
		n.server.Close()
		n.peers.closeAll()
		close(n.stop)
		n.bgMu.Lock()
		n.bgOff = true
		n.bgMu.Unlock()
		n.bg.Wait()
		n.wg.Wait()
		n.closeStore()
	})
}

// Install puts st in n's local store as key's state, as a hand-over
// would: tests use it to put a state where the ring does not send the key.
func Install(n *Node, key string, st memstore.State) {
	n.own.begin()
	n.installLocked(key, st, hold.Fresh(n.nowMs(), randOrigin()))
	if n.own.core.Stray(ring.Hash(key)) != "" {
		n.moves.stray(key) // the next push sends it to its owner
	}
	n.own.end()
}

// Holds reports whether n's local store holds a state of key that still
// matters.
func Holds(n *Node, key string) bool { return n.local.Has(key) }

// OnRecallAnswered makes n run f (with what the lease had left) before it
// answers a recall of a lease it held: a slow answer, in tests.
func OnRecallAnswered(n *Node, f func(left int64)) { n.recallAnswered = f }

// RecallsSent is the recall and revoke messages n has tried to send.
func RecallsSent(n *Node) uint64 { return n.leases.recallsSent.Load() }

// HeldLease reports the lease of key that n holds: the member that granted
// it, its id there and what it has left.
func HeldLease(n *Node, key string) (from string, id uint64, left int64, ok bool) {
	n.leases.mu.RLock()
	defer n.leases.mu.RUnlock()
	b := n.leases.held[key]
	if b == nil {
		return "", 0, 0, false
	}
	return b.from, b.id, b.left.Load(), true
}

// GiveBack makes n give left hits of key's lease id back to the member
// from, whether n holds that lease or not: a give-back that comes late, or
// names a grant that is not n's, in tests.
func GiveBack(n *Node, key string, rule ringlimit.Rule, from string, id uint64, left int64) {
	b := &borrowed{rule: rule, from: from, id: id}
	b.left.Store(left)
	n.giveBack(key, b)
}

// Leasing reports whether n may grant leases by now: a node starts to once
// leaseTTL has passed since it started (an earlier node under its name may
// have leased).
func Leasing(n *Node) bool {
	n.leases.lentMu.Lock()
	defer n.leases.lentMu.Unlock()
	return n.leases.clock.Mono()-n.leases.freshAll >= leaseTTL.Milliseconds()
}

// LeaseAsks is the lease requests of n on their way.
func LeaseAsks(n *Node) int {
	n.leases.mu.RLock()
	defer n.leases.mu.RUnlock()
	return n.leases.asks
}

// LentOut is the hits of key that n lent under rule in grants that have not
// expired.
func LentOut(n *Node, key string, rule ringlimit.Rule) int64 {
	out, _, _ := n.leases.outstanding(key, rule)
	return out
}

// SayLeaving makes n take member, in its current run, for one that
// announced its leave (as its leave intent does), whatever gossip says.
func SayLeaving(n *Node, member string) {
	h := func(name string) (uint64, bool) {
		if name != member {
			return n.members.Leaving(name)
		}
		n.own.mu.Lock()
		defer n.own.mu.Unlock()
		inc := n.own.gossip.incs[name]
		return inc, inc != 0
	}
	n.leavingHook.Store(&h)
}

// DropLeaver makes n drop member, in its current run, from its view as one
// that left (as gossip of its leave does).
func DropLeaver(n *Node, member string) {
	n.own.mu.Lock()
	inc := n.own.gossip.incs[member]
	n.own.mu.Unlock()
	n.leaves(member, inc)
}

// ResetHeld resets key's state at n, which holds it, as a Reset served
// there does, without the revoke of its leases that follows (RevokeLeases):
// a test serves a give-back in between.
func ResetHeld(n *Node, key string) error {
	n.own.mu.RLock()
	defer n.own.mu.RUnlock()
	return n.resetHeld(context.Background(), key)
}

// RevokeLeases revokes the leases n gave of key, as a Reset does after it.
func RevokeLeases(n *Node, key string) {
	n.recallLeases(context.Background(), key, true, time.Now().Add(5*time.Second))
}

// ReturnLeases makes n give back every lease it holds, as Close does.
func ReturnLeases(n *Node) { n.returnLeases() }

// ReserveOnce is one ask of WaitN for hits of key at n's holder of it:
// the Decision, how long until the hits act or the waiter asks again, and
// the cancel WaitN sends if its waiter gives up then.
func ReserveOnce(n *Node, key string, rule ringlimit.Rule, hits int64) (ringlimit.Decision, time.Duration, func(), error) {
	ctx := context.Background()
	w := &waitCall{}
	d, err := n.route(ctx, n.now(), ring.Hash(key), "", peer.Request{Op: opReserve, Key: key, Rule: rule, N: hits}, &extra{wait: w})
	return d, w.wait, func() { n.cancelWait(ctx, key, rule, w) }, err
}
