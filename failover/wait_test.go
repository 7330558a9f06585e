package failover_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/local"
)

// reserver is a primary that reserves (a failover.Reserver) on an
// in-memory limiter, as remote.Limiter does in the store; a test makes it
// fail or hang, and it counts the reservations given back.
type reserver struct {
	*local.Limiter
	mode    atomic.Int32 // answer, fail or hang (fake_test.go)
	calls   atomic.Int64
	cancels atomic.Int64
}

func (r *reserver) Reserve(ctx context.Context, key string, rule ringlimit.Rule, n int64, by time.Time) (ringlimit.Decision, time.Time, func(context.Context) error, error) {
	r.calls.Add(1)
	switch r.mode.Load() {
	case fail:
		return ringlimit.Decision{}, time.Time{}, nil, errStoreDown
	case hang:
		<-ctx.Done()
		return ringlimit.Decision{}, time.Time{}, nil, ctx.Err()
	}
	res, err := r.ReserveN(time.Now(), key, rule, n, by)
	if err != nil {
		return ringlimit.Decision{}, res.At, nil, err
	}
	res.Decision.Source = ringlimit.Store
	cancel := func(context.Context) error {
		r.cancels.Add(1)
		r.CancelAt(time.Now(), res)
		return nil
	}
	return res.Decision, res.At, cancel, nil
}

var _ failover.Reserver = (*reserver)(nil)

// 1 per 100 ms, burst 1.
var tenth = ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 1}

// The call timeout bounds the reservation's round trip, not the wait: a
// 300 ms wait under a 50 ms timeout is slept through, in one call.
func TestWaitTimeoutBoundsRoundTripNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &reserver{Limiter: local.New(local.Config{})}
		l := failover.New(p, failover.Config{Timeout: 50 * time.Millisecond})
		start := time.Now()
		for range 4 { // the burst, then three at 100 ms each
			if d, err := l.Wait(ctx, "k", tenth); err != nil || !d.Allowed || d.Source != ringlimit.Store {
				t.Fatalf("wait: %+v, %v", d, err)
			}
		}
		if took := time.Since(start); took != 300*time.Millisecond {
			t.Fatalf("4 waits on 1 per 100 ms took %s, want 300 ms", took)
		}
		if p.calls.Load() != 4 {
			t.Fatalf("%d reservations for 4 waits", p.calls.Load())
		}
	})
}

// A refusal for the deadline and a cancelled ctx pass through as errors:
// the breaker does not count them and the policy does not answer them.
func TestWaitCallerErrorsPassThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &reserver{Limiter: local.New(local.Config{})}
		l := failover.New(p, failover.Config{MaxFailures: 2})
		slow := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1, Window: time.Hour}
		l.Wait(ctx, "k", slow) // the burst
		for range 5 {
			dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err := l.Wait(dctx, "k", slow)
			cancel()
			if !errors.Is(err, ringlimit.ErrWaitTooLong) {
				t.Fatalf("past the deadline: %v, want ErrWaitTooLong", err)
			}
		}
		for range 5 {
			// This caller takes the bucket's one token (after the
			// previous rounds, at its slot) before the waiter is
			// started, so the waiter must queue 100 ms behind it:
			// started together, the waiter could reserve first and be
			// admitted.
			if d, err := l.Wait(ctx, "c", tenth); err != nil || !d.Allowed {
				t.Fatalf("wait: %+v, %v", d, err)
			}
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error)
			go func() { _, err := l.Wait(cctx, "c", tenth); done <- err }()
			synctest.Wait() // the waiter sleeps until its slot
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled: %v", err)
			}
		}
		st := l.Stats()
		if st.State != failover.StateClosed || st.PrimaryErrors != 0 || st.Timeouts != 0 ||
			st.FallbackOpen+st.FallbackClosed+st.FallbackLocalShare != 0 {
			t.Fatalf("caller errors counted against the primary or fell to the policy: %+v", st)
		}
		if p.cancels.Load() == 0 {
			t.Fatal("no cancelled waiter gave its reservation back")
		}
	})
}

// When the primary cannot answer, the policy decides at once: Open admits,
// Closed refuses with ErrPolicyClosed, LocalShare waits on the local share.
func TestWaitPolicies(t *testing.T) {
	for _, mode := range []int32{fail, hang} {
		synctest.Test(t, func(t *testing.T) {
			p := &reserver{Limiter: local.New(local.Config{})}
			p.mode.Store(mode)
			open := failover.New(p, failover.Config{})
			if d, err := open.Wait(ctx, "k", tenth); err != nil || !d.Allowed || d.Source != ringlimit.Fallback {
				t.Fatalf("open: %+v, %v", d, err)
			}
			closed := failover.New(p, failover.Config{Policy: failover.Closed})
			if d, err := closed.Wait(ctx, "k", tenth); !errors.Is(err, failover.ErrPolicyClosed) || d.Allowed {
				t.Fatalf("closed: %+v, %v, want ErrPolicyClosed", d, err)
			}
			share := failover.New(p, failover.Config{Policy: failover.LocalShare, Local: local.New(local.Config{})})
			start := time.Now()
			for range 3 {
				if d, err := share.Wait(ctx, "k", tenth); err != nil || !d.Allowed || d.Source != ringlimit.Fallback {
					t.Fatalf("local share: %+v, %v", d, err)
				}
			}
			// The share's bucket paces: the burst, then 100 ms each, plus
			// the hung calls' timeouts (50 ms each) until the breaker opens.
			took := time.Since(start)
			if took < 200*time.Millisecond {
				t.Fatalf("3 waits on the local share of 1 per 100 ms took %s", took)
			}
		})
	}
}

// A plain primary (no Reserver, no Waiter) is asked by AllowN and each
// denial's RetryAfter slept.
func TestWaitPlainPrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type plain struct{ ringlimit.Limiter }
		l := failover.New(plain{local.New(local.Config{})}, failover.Config{})
		start := time.Now()
		for range 3 {
			if d, err := l.Wait(ctx, "k", tenth); err != nil || !d.Allowed {
				t.Fatalf("wait: %+v, %v", d, err)
			}
		}
		if took := time.Since(start); took != 200*time.Millisecond {
			t.Fatalf("3 waits on 1 per 100 ms took %s, want 200 ms", took)
		}
	})
}
