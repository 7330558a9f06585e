package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/remote"
)

// A waiter's reservation is out in the store when the app resets the key;
// callers use the fresh state's capacity, then the waiter gives up. The
// cancel script compares the epoch of the state it reserved in with the
// stored one's, finds the state gone, and gives nothing back (counted).
// Before the epoch it gave its 10 hits to the new state: 20 of 10. The
// clock is held still, so a leaky bucket's queue does not drain meanwhile.
func TestCancelAfterResetGivesNothingBack(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := testclock.New(time.Now().Truncate(time.Millisecond))
			l := remote.New(c, remote.Config{Clock: clk})
			rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Hour}
			key := "stale-" + alg.String()
			if d, err := l.AllowN(ctx, key, rule, 10); err != nil || !d.Allowed {
				t.Fatalf("the burst: %+v, %v", d, err)
			}
			d, at, cancel, err := l.Reserve(ctx, key, rule, 10, time.Time{})
			if err != nil || !d.Allowed || cancel == nil || !at.After(time.Now()) {
				t.Fatalf("reservation: %+v at %v, %v", d, at, err)
			}
			if err := l.Reset(ctx, key); err != nil {
				t.Fatal(err)
			}
			admitted := 0
			allow := func(k int) {
				for range k {
					d, err := l.AllowN(ctx, key, rule, 1)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						admitted++
					}
				}
			}
			allow(10)
			if err := cancel(ctx); err != nil {
				t.Fatal(err)
			}
			allow(20)
			if admitted != 10 {
				t.Fatalf("after the Reset the key admitted %d, want 10", admitted)
			}
			if got := l.StaleCancels(); got != 1 {
				t.Fatalf("StaleCancels = %d, want 1", got)
			}
		})
	}
}

// A cancel in the state it reserved in still gives back, after decisions
// that kept the state's epoch; a second reservation shares it.
func TestCancelSameStateGivesBack(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	clk := testclock.New(time.Now().Truncate(time.Millisecond))
	l := remote.New(c, remote.Config{Clock: clk})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Hour}
	l.AllowN(ctx, "k", rule, 10)
	_, _, cancel1, err := l.Reserve(ctx, "k", rule, 5, time.Time{})
	if err != nil || cancel1 == nil {
		t.Fatal(err)
	}
	l.AllowN(ctx, "k", rule, 1) // denied: the state and its epoch stay
	_, _, cancel2, err := l.Reserve(ctx, "k", rule, 5, time.Time{})
	if err != nil || cancel2 == nil {
		t.Fatal(err)
	}
	if err := cancel2(ctx); err != nil { // the last: all 5 back
		t.Fatal(err)
	}
	if err := cancel1(ctx); err != nil { // now the last: all 5 back
		t.Fatal(err)
	}
	if d, _ := l.Peek(ctx, "k", rule); d.RetryAfter > 6*time.Minute {
		t.Fatalf("after both cancels: %+v, want the next hit within one refill (6 min)", d)
	}
	if got := l.StaleCancels(); got != 0 {
		t.Fatalf("StaleCancels = %d, want 0", got)
	}
}
