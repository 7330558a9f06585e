package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
)

// Guard's calls count for the breaker as decisions do: failures open it,
// an open breaker keeps the call from the primary, a timeout counts as a
// timeout, the caller's own cancellation counts for nothing, and a success
// after the cooldown closes it.
func TestGuard(t *testing.T) {
	f := newFake()
	l := failover.New(f, failover.Config{MaxFailures: 3, Cooldown: 20 * time.Millisecond})
	write := func(ctx context.Context) error {
		_, err := f.AllowN(ctx, "k", ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Second}, 1)
		return err
	}

	// The caller's own cancellation: returned, not counted.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.set(hang)
	for range 4 {
		if err := l.Guard(ctx, time.Second, write); !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled: %v", err)
		}
	}
	if st := l.Stats(); st.State != failover.StateClosed || st.Canceled != 4 || st.PrimaryErrors+st.Timeouts != 0 {
		t.Fatalf("after 4 canceled calls: %+v", st)
	}

	// A timeout, then errors: three consecutive failures open the breaker.
	if err := l.Guard(context.Background(), 5*time.Millisecond, write); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hang: %v", err)
	}
	f.set(fail)
	for range 2 {
		if err := l.Guard(context.Background(), time.Second, write); !errors.Is(err, errStoreDown) {
			t.Fatalf("fail: %v", err)
		}
	}
	st := l.Stats()
	if st.State != failover.StateOpen || st.Timeouts != 1 || st.PrimaryErrors != 2 || st.Opens != 1 {
		t.Fatalf("after a timeout and 2 errors: %+v", st)
	}
	calls := f.calls.Load()
	if err := l.Guard(context.Background(), time.Second, write); !errors.Is(err, failover.ErrOpen) || f.calls.Load() != calls {
		t.Fatalf("open: %v, %d calls reached the primary", err, f.calls.Load()-calls)
	}

	// After the cooldown a Guard call is the probe; its success closes.
	f.set(answer)
	deadline := time.Now().Add(10 * time.Second) // the cooldown is 20 ms; the rest is a busy machine's slack
	for l.Guard(context.Background(), time.Second, write) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no probe let through: %+v", l.Stats())
		}
		time.Sleep(time.Millisecond) // a poll interval, not a wait for an event
	}
	if st := l.Stats(); st.State != failover.StateClosed {
		t.Fatalf("after a successful probe: %+v", st)
	}
}
