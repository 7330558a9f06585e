package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// A waiter is out on an exhausted bucket, on a key this node holds and on
// one a peer holds, when the app resets the key; callers use the fresh
// capacity, then the waiter gives up. Its cancel names the state it was
// reserved in, which the Reset ended: the holder drops it and counts it,
// and the key admits exactly its capacity after the Reset. (Before the
// states' epochs, the cancel gave its 10 hits to the new state: 20 of 10.)
func TestWaiterCancelAfterResetGivesNothingBack(t *testing.T) {
	c := nodetest.Start(t, 2, nil)
	a, b := c.Nodes[0], c.Nodes[1]
	keys := keysOwnedBy(a, a.Name(), 2)
	fwd := keysOwnedBy(a, b.Name(), 2)
	i := 0
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		for _, k := range []struct {
			name, key string
			holder    interface{ StaleCancels() uint64 }
		}{
			{"owned", keys[i], staleOf{a}},
			{"forwarded", fwd[i], staleOf{b}},
		} {
			t.Run(alg.String()+"/"+k.name, func(t *testing.T) {
				rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Hour}
				if d, err := a.AllowN(ctx, k.key, rule, 10); err != nil || !d.Allowed {
					t.Fatalf("the burst: %+v, %v", d, err)
				}
				before := k.holder.StaleCancels()
				wctx, giveUp := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { _, err := a.WaitN(wctx, k.key, rule, 10); done <- err }()
				waitFor(t, 10*time.Second, "the reservation", func() bool {
					d, err := a.Peek(ctx, k.key, rule)
					return err == nil && d.RetryAfter > 30*time.Minute // the waiter's 10 hits are in
				})
				if err := a.Reset(ctx, k.key); err != nil {
					t.Fatal(err)
				}
				admitted := 0
				for range 10 {
					if d, _ := a.Allow(ctx, k.key, rule); d.Allowed {
						admitted++
					}
				}
				giveUp()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("the waiter: %v", err)
				}
				for range 20 {
					if d, _ := a.Allow(ctx, k.key, rule); d.Allowed {
						admitted++
					}
				}
				// A leaky bucket's first queued hit departs at once: a
				// millisecond on, its place in the queue is free again.
				if want := 10; admitted != want && !(alg == ringlimit.LeakyBucket && admitted == want+1) {
					t.Fatalf("after the Reset the key admitted %d, want %d", admitted, want)
				}
				if got := k.holder.StaleCancels() - before; got != 1 {
					t.Fatalf("the holder counted %d stale cancels, want 1", got)
				}
			})
		}
		i++
	}
}

// staleOf reads a node's count of dropped give-backs.
type staleOf struct {
	n interface{ Stats() node.Stats }
}

func (s staleOf) StaleCancels() uint64 { return s.n.Stats().Local.StaleCancels }

// Window waiters that give up, on a key this node holds and on one a peer
// holds, leave the key's queue at its holder: after 30 gave up, the next
// waiter is told to ask again at the window's edge, not behind their
// places (30 places on a window of 10 an hour: two hours past the edge). One ask of
// WaitN at a time (ReserveOnce), then the cancel WaitN sends.
func TestWindowWaitersThatGiveUpLeaveTheHoldersQueue(t *testing.T) {
	c := nodetest.Start(t, 2, nil)
	a, b := c.Nodes[0], c.Nodes[1]
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Hour}
	for _, k := range []struct{ name, key string }{
		{"owned", keysOwnedBy(a, a.Name(), 1)[0]},
		{"forwarded", keysOwnedBy(a, b.Name(), 1)[0]},
	} {
		t.Run(k.name, func(t *testing.T) {
			if d, err := a.AllowN(ctx, k.key, rule, 10); err != nil || !d.Allowed {
				t.Fatalf("the window's hits: %+v, %v", d, err)
			}
			var cancels []func()
			var last time.Duration
			for range 30 {
				d, wait, cancel, err := node.ReserveOnce(a, k.key, rule, 1)
				if err != nil || d.Allowed {
					t.Fatalf("a waiter on a full window: %+v, %v", d, err)
				}
				cancels, last = append(cancels, cancel), wait
			}
			if last < 2*time.Hour {
				t.Fatalf("the 30th waiter asks again %s on, want behind 30 places (two hours past the edge)", last)
			}
			for _, cancel := range cancels {
				cancel()
			}
			_, wait, _, err := node.ReserveOnce(a, k.key, rule, 1)
			if err != nil || wait > time.Hour {
				t.Fatalf("after 30 waiters gave up, the next asks again %s on (%v), want at the window's edge, within the hour", wait, err)
			}
		})
	}
}

// The same at the store tier: the key's holder cannot be reached, so a's
// waiter reserves in the store; the app resets the key there, callers use
// the fresh capacity, and the waiter gives up. The store's cancel script
// gives nothing back, and a counts it (Stats.StaleCancels).
func TestStoreWaiterCancelAfterResetGivesNothingBack(t *testing.T) {
	srv := valkeytest.Start(t)
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.ValkeyAddrs = []string{srv.Addr()}
		cfg.ForwardTimeout = 200 * time.Millisecond
	})
	a, b := c.Nodes[0], c.Nodes[1]
	key := keysOwnedBy(a, b.Name(), 1)[0]
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Hour}
	c.Network.Drop(a.Name(), b.Name())
	waitFor(t, 10*time.Second, "a deciding b's keys at the store", func() bool {
		d, err := a.Peek(ctx, "probe-"+key, rule)
		return err == nil && d.Source == ringlimit.Store
	})
	if d, err := a.AllowN(ctx, key, rule, 10); err != nil || !d.Allowed || d.Source != ringlimit.Store {
		t.Fatalf("the burst: %+v, %v", d, err)
	}
	wctx, giveUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := a.WaitN(wctx, key, rule, 10); done <- err }()
	waitFor(t, 10*time.Second, "the reservation", func() bool {
		d, err := a.Peek(ctx, key, rule)
		return err == nil && d.RetryAfter > 30*time.Minute
	})
	if err := a.Reset(ctx, key); err != nil {
		t.Fatal(err)
	}
	admitted := 0
	for range 10 {
		if d, _ := a.Allow(ctx, key, rule); d.Allowed {
			admitted++
		}
	}
	giveUp()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter: %v", err)
	}
	for range 20 {
		if d, _ := a.Allow(ctx, key, rule); d.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("after the Reset the key admitted %d at the store, want 10", admitted)
	}
	if got := a.Stats().StaleCancels; got != 1 {
		t.Fatalf("StaleCancels = %d, want 1", got)
	}
}
