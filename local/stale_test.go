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

// A waiter is out on an exhausted bucket when the app resets the key;
// callers use the fresh capacity, then the waiter gives up. Its give-back
// belongs to the state before the Reset: the key still admits exactly its
// capacity after the Reset, and the dropped give-back is counted. (Before
// the states' epochs: 20 of 10.)
func TestWaiterCancelAfterResetGivesNothingBack(t *testing.T) {
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Hour}
				l := local.New(local.Config{})
				ctx := context.Background()
				if d, _ := l.AllowN(ctx, "k", rule, 10); !d.Allowed {
					t.Fatal("the burst was denied")
				}
				wctx, giveUp := context.WithCancel(ctx)
				done := make(chan error)
				go func() { _, err := l.WaitN(wctx, "k", rule, 10); done <- err }()
				synctest.Wait() // the waiter holds its reservation
				if err := l.Reset(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				admitted := 0
				for range 10 {
					if d, _ := l.AllowN(ctx, "k", rule, 1); d.Allowed {
						admitted++
					}
				}
				giveUp()
				if err := <-done; !errors.Is(err, context.Canceled) {
					t.Fatalf("the waiter: %v", err)
				}
				for range 20 {
					if d, _ := l.AllowN(ctx, "k", rule, 1); d.Allowed {
						admitted++
					}
				}
				if admitted != 10 {
					t.Fatalf("after the Reset the key admitted %d, want 10", admitted)
				}
				if got := l.Stats().StaleCancels; got != 1 {
					t.Fatalf("StaleCancels = %d, want 1", got)
				}
			})
		})
	}
}
