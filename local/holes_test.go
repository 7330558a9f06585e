package local_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
)

// 1,000 goroutines wait on a bucket the burst emptied, each with its own
// context, and all give up (their contexts end in the order they came):
// with nobody waiting, the next call is decided exactly as on a key that
// saw only the burst. (Before: the cancels gave back only what no later
// waiter was promised, and the bucket refused for about 100 s.)
func TestCancelledWaitersLeaveNoTrace(t *testing.T) {
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Second}
				l := local.New(local.Config{})
				ctx := context.Background()
				for _, k := range []string{"k", "twin"} {
					if d, _ := l.AllowN(ctx, k, rule, rule.Capacity()); !d.Allowed {
						t.Fatal("the burst was denied")
					}
				}
				const waiters = 1000
				gaveUp := make(chan error, waiters)
				var stops []context.CancelFunc
				for range waiters {
					wctx, stop := context.WithCancel(ctx)
					stops = append(stops, stop)
					go func() { _, err := l.Wait(wctx, "k", rule); gaveUp <- err }()
					synctest.Wait() // it holds its reservation: the next comes after it
				}
				time.Sleep(10 * time.Millisecond) // (the bubble's clock)
				for _, stop := range stops {
					stop()
					synctest.Wait() // its cancel is in before the next
				}
				for range waiters {
					if err := <-gaveUp; !errors.Is(err, context.Canceled) {
						t.Fatalf("a waiter: %v, want context.Canceled", err)
					}
				}
				for _, after := range []time.Duration{0, 90 * time.Millisecond, time.Second} {
					time.Sleep(after)
					got, _ := l.AllowN(ctx, "k", rule, 1)
					want, _ := l.AllowN(ctx, "twin", rule, 1)
					if got != want {
						t.Fatalf("%v later: %+v, as if the waiters never came: %+v", after, got, want)
					}
				}
			})
		})
	}
}
