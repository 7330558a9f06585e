package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// An owner cut off from the caller's node alone (its gossip still says it
// is alive) is waited for with OwnerWait: nothing goes to the fail-open
// policy, a caller whose deadline passes gets its context's error, and a
// caller still waiting when the link heals is decided by the owner. Without
// OwnerWait the same call is decided by the policy (the control).
func TestOwnerWaitPrefersTheOwner(t *testing.T) {
	for _, wait := range []time.Duration{0, 5 * time.Second} {
		c := nodetest.Start(t, 2, func(cfg *node.Config) {
			cfg.OwnerWait = wait
			cfg.HandoffWindow = time.Millisecond
			// The LAN timings: beside eight busy loops the fast preset's
			// probes starved and the owner was dropped from the view
			// (the call then rightly went to the policy), which is not
			// this test's subject.
			cfg.Gossip = node.GossipLAN
		})
		c.WaitSettled(t, 10*time.Second)
		a, b := c.Nodes[0], c.Nodes[1]
		rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1000, Window: time.Hour}
		key := keysOwnedBy(a, b.Name(), 1)[0]
		if d, err := a.Allow(ctx, key, rule); err != nil || d.Source != ringlimit.Peer {
			t.Fatalf("OwnerWait %v: before the cut: %+v, %v", wait, d, err)
		}
		c.Network.Drop(a.Name(), b.Name())
		if wait == 0 {
			d, err := a.Allow(ctx, key, rule)
			if err != nil || d.Source != ringlimit.Fallback {
				t.Fatalf("without OwnerWait, an owner cut off: %+v, %v; want the policy's decision", d, err)
			}
			continue
		}
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		d, err := a.Allow(short, key, rule)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("OwnerWait, deadline 300 ms, owner cut off: %+v, %v; want context.DeadlineExceeded", d, err)
		}
		if st := a.Stats(); st.OwnerWaitsEnded != 1 || st.Store.FallbackOpen != 0 || st.Decisions[ringlimit.Fallback] != 0 {
			t.Fatalf("OwnerWaitsEnded %d, fallback decisions %d (%d by the policy); want 1, 0, 0", st.OwnerWaitsEnded, st.Decisions[ringlimit.Fallback], st.Store.FallbackOpen)
		}
		// A caller with time left: the link heals while it waits.
		before := a.Stats().Reroutes
		done := make(chan ringlimit.Decision, 1)
		go func() {
			d, err := a.Allow(ctx, key, rule)
			if err != nil {
				t.Error(err)
			}
			done <- d
		}()
		waitFor(t, 10*time.Second, "the call going down the chain again", func() bool { return a.Stats().Reroutes >= before+2 })
		c.Network.Restore(a.Name(), b.Name())
		if d := <-done; d.Source != ringlimit.Peer || !d.Allowed {
			t.Fatalf("OwnerWait, link healed while waiting: %+v; want the owner's decision", d)
		}
		if st := a.Stats(); st.Decisions[ringlimit.Fallback] != 0 {
			t.Fatalf("%d fallback decisions with OwnerWait", st.Decisions[ringlimit.Fallback])
		}
	}
}

// lateContext's deadline has passed but its timer has not fired: Err is
// still nil, as a context's is for a moment after its deadline on a busy
// machine.
type lateContext struct{ context.Context }

func (lateContext) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// A call whose deadline passes while it waits for a live owner returns
// context.DeadlineExceeded even if its context's timer has not fired yet
// (beside eight busy loops TestOwnerWaitPrefersTheOwner got the fail-open
// policy's decision at the deadline instead).
func TestOwnerWaitEndsAtTheDeadline(t *testing.T) {
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.OwnerWait = 5 * time.Second
		cfg.Gossip = node.GossipLAN
	})
	c.WaitSettled(t, 10*time.Second)
	a, b := c.Nodes[0], c.Nodes[1]
	rule := ringlimit.Rule{Limit: 1000, Window: time.Hour}
	key := keysOwnedBy(a, b.Name(), 1)[0]
	c.Network.Drop(a.Name(), b.Name())
	d, err := a.Allow(lateContext{ctx}, key, rule)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call past its deadline, owner cut off: %+v, %v; want context.DeadlineExceeded", d, err)
	}
	if st := a.Stats(); st.Decisions[ringlimit.Fallback] != 0 || st.OwnerWaitsEnded != 1 {
		t.Fatalf("%d fallback decisions, %d owner waits ended; want 0 and 1", st.Decisions[ringlimit.Fallback], st.OwnerWaitsEnded)
	}
}
