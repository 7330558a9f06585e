package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// 100 waiters on a bucket the burst emptied, on a key this node holds (the
// cancels go to its own state) and on one a peer holds (each cancel goes
// over the peer link with its ticket), all give up: with nobody waiting,
// the key admits as if they had never come, its next hit due within one
// hit's interval of the burst. (Before, the cancels gave back only what no
// later waiter was promised: the next hit was due in about 10 h.) The rule,
// 10 an hour, drains 1 hit in 6 minutes, so real time passing during the
// test changes nothing measured.
func TestCancelledWaitersLeaveNoTrace(t *testing.T) {
	c := nodetest.Start(t, 2, nil)
	a, b := c.Nodes[0], c.Nodes[1]
	owned := keysOwnedBy(a, a.Name(), 2)
	fwd := keysOwnedBy(a, b.Name(), 2)
	for i, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		for _, k := range []struct{ name, key string }{{"owned", owned[i]}, {"forwarded", fwd[i]}} {
			t.Run(alg.String()+"/"+k.name, func(t *testing.T) {
				rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Hour}
				interval := rule.Window / time.Duration(rule.Limit)
				if d, err := a.AllowN(ctx, k.key, rule, 10); err != nil || !d.Allowed {
					t.Fatalf("the burst: %+v, %v", d, err)
				}
				const waiters = 100
				done := make(chan error, waiters)
				stops := make([]context.CancelFunc, waiters)
				for i := range stops {
					wctx, stop := context.WithCancel(ctx)
					stops[i] = stop
					go func() { _, err := a.Wait(wctx, k.key, rule); done <- err }()
				}
				defer func() {
					for _, stop := range stops {
						stop()
					}
				}()
				waitFor(t, 10*time.Second, fmt.Sprintf("%d reservations", waiters), func() bool {
					d, err := a.Peek(ctx, k.key, rule)
					return err == nil && d.RetryAfter > (waiters-1)*interval
				})
				for _, stop := range stops {
					stop()
				}
				for range waiters {
					if err := <-done; !errors.Is(err, context.Canceled) {
						t.Fatalf("a waiter: %v, want context.Canceled", err)
					}
				}
				// A cancel over the peer link is best effort and may still be
				// on its way when the waiter returns: poll.
				var d ringlimit.Decision
				waitFor(t, 10*time.Second, "the waiters' hits back", func() bool {
					var err error
					d, err = a.Peek(ctx, k.key, rule)
					return err == nil && d.RetryAfter <= interval
				})
				t.Logf("after %d cancels: next hit due in %v", waiters, d.RetryAfter)
				if s := a.Stats().Local.StaleCancels + b.Stats().Local.StaleCancels; s != 0 {
					t.Fatalf("%d cancels counted stale", s)
				}
			})
		}
	}
}
