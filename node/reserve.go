package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
)

// Giving back: a caller that charged hits with AllowN and then did not
// use them (a request that another of its limits refused, all or nothing
// across keys on several owners) gives them back to whoever decided the
// charge, best effort, so that the refused request charges nothing.
//
// The give travels in the peer link's OpStates frames, as the wait and
// lease messages do (waitwire.go):
//
//	header: key giveMagic | value: empty
//	give:   key | rule | n i64 | at i64 (ms) | remaining i64 (see memstore.Charge)
//
// A node of the release before refuses it as a push it cannot read (its
// give1 carried a window index, not the charge's instant): the hits then
// stay charged.
const giveMagic = "\x00give2"

var errGiveMsg = errors.New("node: malformed give message")

// storeGiver is the store's give-back (remote.Connector.GiveBack).
type storeGiver interface {
	GiveBack(ctx context.Context, key string, rule ringlimit.Rule, hits, at, remaining int64) (bool, error)
}

// GiveBack gives back hits that AllowN(ctx, key, rule, hits) charged and
// its caller did not use; charged is that call's Decision, and at the
// node's clock (Config.Clock) read just before that call. It is best
// effort, and never gives more than the charge still weighs (see
// memstore.GiveBack for each algorithm: a leaky bucket gives back only
// hits no later one queued behind, a sliding log only from its newest
// instant, a window only while it counts them, a bucket less what it has
// drained since), so a refused request may charge, never admit more.
// Where the charge was decided:
//
//   - Local: by this node's state of the key, or by a lease this node
//     holds of it (the lease gets the hits back, if it has held the key
//     since before the charge, under the same rule, in the same window);
//   - Peer: by the key's holder, which gets the give over the peer link
//     (after a hand-off, the new holder; a state that left in between
//     keeps the hits);
//   - Store: by the central store, through the store's breaker;
//   - Fallback: by the policy, which with Open and Closed charged
//     nothing; LocalShare's local share keeps the hits.
//
// at is taken as no later than the decider's instant of the charge: so it
// is for this node's own state and leases; for a peer or the store, their
// clocks must not run behind this node's (by more than the gap between
// at and the charge), or a give may take a later call's hits. (A give
// whose at is after the decider's now gives nothing: only a skew shorter
// than the time from the charge to the give gets past that.)
//
// Errors are those of bad input, a closed node and an ended ctx; a give
// that does not reach the decider is not an error.
func (n *Node) GiveBack(ctx context.Context, key string, rule ringlimit.Rule, hits int64, charged ringlimit.Decision, at time.Time) error {
	if n.closed.Load() {
		return ringlimit.ErrClosed
	}
	if err := ringlimit.ValidateCall(key, rule, hits); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("node: give back on %q: %w", key, err)
	}
	if hits == 0 || !charged.Allowed {
		return nil
	}
	ch := memstore.Charge{N: hits, At: at.UnixMilli(), Remaining: charged.Remaining}
	switch charged.Source {
	case ringlimit.Fallback:
		return nil
	case ringlimit.Store:
		n.giveStore(ctx, key, rule, ch)
		return nil
	case ringlimit.Local:
		if n.giveLease(key, rule, ch) {
			return nil
		}
	}
	owner := n.Owner(key)
	if owner == "" || owner == n.name {
		n.giveHere(key, rule, ch)
		return nil
	}
	pc := n.peers.get(owner)
	if pc == nil {
		return nil
	}
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), pc.client.timeout())
	defer stop()
	_, _ = pc.client.Do(cctx, giveRequest(key, rule, ch))
	return nil
}

// giveStore gives a charge the store decided back to it.
func (n *Node) giveStore(ctx context.Context, key string, rule ringlimit.Rule, ch memstore.Charge) {
	g, ok := n.states.(storeGiver)
	if !ok {
		return
	}
	_ = n.store.Guard(context.WithoutCancel(ctx), n.cfg.StoreTimeout, func(ctx context.Context) error {
		if _, err := g.GiveBack(ctx, key, rule, ch.N, ch.At, ch.Remaining); !errors.Is(err, ringlimit.ErrBadValue) {
			return err
		}
		return nil // the key's problem, not the store's: no breaker failure
	})
}

func floorDivMs(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// giveLease gives a Local charge back to the lease this node holds of
// key, if it may have come from it: a lease asked for before the charge
// (so it was held then, or replaced one that was), under the same rule,
// not expired, and for a window, in the window of the charge (a lease
// lives within one window: hits of another window's must not be spent in
// this one). It reports whether the key was leased here: a lease that
// cannot take them keeps the hits; the charge was not the holder's.
func (n *Node) giveLease(key string, rule ringlimit.Rule, ch memstore.Charge) bool {
	ls := &n.leases
	if ls.nheld.Load() == 0 {
		return false
	}
	ls.mu.RLock()
	b := ls.held[key]
	ls.mu.RUnlock()
	if b == nil {
		return false
	}
	now, mono := n.nowMs(), ls.clock.Mono()
	chargedAt := mono - max(0, now-ch.At) // the charge's instant, at the latest, on the lease clock
	w := rule.WindowMillis()
	sameWindow := floorDivMs(now, w) == floorDivMs(ch.At, w) ||
		rule.Algorithm == ringlimit.TokenBucket || rule.Algorithm == ringlimit.LeakyBucket || rule.Algorithm == ringlimit.SlidingLog
	if b.rule == rule && b.at <= chargedAt && mono < b.until && sameWindow {
		b.left.Add(ch.N)
	}
	return true
}

// giveHere gives a charge back to key's state, if it is here.
func (n *Node) giveHere(key string, rule ringlimit.Rule, ch memstore.Charge) {
	o := &n.own
	o.mu.RLock()
	defer o.mu.RUnlock()
	if n.local.Has(key) {
		n.local.GiveBack(n.now(), key, rule, ch)
	}
}

func giveRequest(key string, rule ringlimit.Rule, ch memstore.Charge) *peer.Request {
	v := appendRule(make([]byte, 0, ruleLen+24), rule)
	v = binary.BigEndian.AppendUint64(v, uint64(ch.N))
	v = binary.BigEndian.AppendUint64(v, uint64(ch.At))
	v = binary.BigEndian.AppendUint64(v, uint64(ch.Remaining))
	return &peer.Request{Op: peer.OpStates, States: []peer.Item{{Key: giveMagic}, {Key: key, Value: v}}}
}

// isGive reports whether a push's items are a give message.
func isGive(items []peer.Item) bool { return len(items) > 0 && items[0].Key == giveMagic }

// parseGive decodes a give message. Every byte is the sender's: the key,
// the rule and the hits are checked as a call's are, and the instant and
// the remaining must be ones a charge can have.
func parseGive(items []peer.Item) (key string, rule ringlimit.Rule, ch memstore.Charge, err error) {
	if !isGive(items) || len(items) != 2 || len(items[0].Value) != 0 || len(items[1].Value) != ruleLen+24 {
		return "", rule, ch, fmt.Errorf("%w: shape", errGiveMsg)
	}
	key, v := items[1].Key, items[1].Value
	if rule, err = readRule(v); err != nil {
		return "", rule, ch, fmt.Errorf("%w: %w", errGiveMsg, err)
	}
	v = v[ruleLen:]
	ch = memstore.Charge{N: int64(binary.BigEndian.Uint64(v)), At: int64(binary.BigEndian.Uint64(v[8:])), Remaining: int64(binary.BigEndian.Uint64(v[16:]))}
	if err := ringlimit.ValidateCall(key, rule, ch.N); err != nil {
		return "", rule, memstore.Charge{}, fmt.Errorf("%w: %w", errGiveMsg, err)
	}
	if ch.N <= 0 || ch.At < 0 || ch.Remaining < 0 || ch.Remaining > rule.Capacity() {
		return "", rule, memstore.Charge{}, fmt.Errorf("%w: %d hits at %d ms, %d remaining", errGiveMsg, ch.N, ch.At, ch.Remaining)
	}
	return key, rule, ch, nil
}

// serveGive serves a give message.
func (n *Node) serveGive(items []peer.Item) peer.Result {
	key, rule, ch, err := parseGive(items)
	if err != nil {
		n.stats.badHold.Add(1)
		return peer.Result{Err: err}
	}
	if n.closed.Load() {
		return peer.Result{Err: ringlimit.ErrClosed}
	}
	n.giveHere(key, rule, ch)
	return peer.Result{}
}
