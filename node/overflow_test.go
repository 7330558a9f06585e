package node_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// chargeCounter is a store that counts every call it gets.
type chargeCounter struct {
	l     *local.Limiter
	calls atomic.Int64
}

func (s *chargeCounter) AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	s.calls.Add(1)
	d, err := s.l.AllowN(ctx, key, rule, n)
	d.Source = ringlimit.Store
	return d, err
}
func (s *chargeCounter) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return s.AllowN(ctx, key, rule, 0)
}
func (s *chargeCounter) Reset(ctx context.Context, key string) error {
	s.calls.Add(1)
	return s.l.Reset(ctx, key)
}

// A forwarded call whose decision holds durations longer than a
// time.Duration gets the owner's saturated decision (Source Peer), no error;
// the connection stays up and the store is never asked, so nothing is
// charged twice (issue 14, item 1).
func TestForwardedOverflowSaturates(t *testing.T) {
	store := &chargeCounter{l: local.New(local.Config{})}
	c := nodetest.Start(t, 2, func(cfg *node.Config) { cfg.Store = store })
	a, b := c.Nodes[0], c.Nodes[1]
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprint("overflow", i); a.Owner(k) == b.Name() {
			key = k
		}
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1, Window: 24 * time.Hour, Burst: 200_000}
	// The wire carries whole milliseconds, rounded up: a saturated duration
	// travels as one millisecond more than fits and saturates again on
	// arrival, so every tier gives exactly MaxDuration.
	saturated := func(d time.Duration) bool { return d == ringlimit.MaxDuration }
	for i, step := range []struct {
		n                int64
		allowed          bool
		remaining        int64
		retrySaturated   bool
		resetIsSaturated bool
	}{
		{150_000, true, 50_000, false, true},
		{200_000, false, 50_000, true, true},
		{1, true, 49_999, false, true},
	} {
		d, err := a.AllowN(ctx, key, rule, step.n)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if d.Source != ringlimit.Peer || d.Allowed != step.allowed || d.Remaining != step.remaining ||
			saturated(d.RetryAfter) != step.retrySaturated || saturated(d.ResetAfter) != step.resetIsSaturated || d.RetryAfter < 0 {
			t.Fatalf("call %d (n %d): %+v, want Source peer, allowed %v, remaining %d, RetryAfter saturated %v, ResetAfter saturated",
				i, step.n, d, step.allowed, step.remaining, step.retrySaturated)
		}
	}
	st := a.Stats()
	if got := store.calls.Load(); got != 0 || st.ForwardFailures != 0 || st.Forwards != 3 {
		t.Fatalf("store calls %d, forwards %d, forward failures %d; want 0, 3, 0", got, st.Forwards, st.ForwardFailures)
	}
	// The owner holds exactly the 150,001 admitted hits.
	if d, err := b.Peek(ctx, key, rule); err != nil || d.Source != ringlimit.Local || d.Remaining != 49_999 {
		t.Fatalf("owner's view: %+v, %v; want Remaining 49999", d, err)
	}
}
