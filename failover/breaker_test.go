package failover_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/failover"
)

func mustAllow(t *testing.T, b *failover.Breaker) func(failover.Outcome) {
	t.Helper()
	done, err := b.Allow()
	if err != nil {
		t.Fatalf("Allow in state %s: %v", b.State(), err)
	}
	return done
}

func TestBreakerCountsConsecutiveFailures(t *testing.T) {
	b := failover.NewBreaker(failover.BreakerConfig{MaxFailures: 3, Cooldown: time.Hour})
	// Ignored outcomes count neither way; a success restarts the count.
	for _, o := range []failover.Outcome{failover.Failure, failover.Failure, failover.Success, failover.Failure, failover.Ignored, failover.Ignored, failover.Failure} {
		mustAllow(t, b)(o)
		if s := b.State(); s != failover.StateClosed {
			t.Fatalf("after %s: %s, want closed (2 consecutive failures at most)", o, s)
		}
	}
	mustAllow(t, b)(failover.Failure)
	if s := b.State(); s != failover.StateOpen {
		t.Fatalf("after 3 consecutive failures: %s, want open", s)
	}
	for range 5 {
		if _, err := b.Allow(); !errors.Is(err, failover.ErrOpen) {
			t.Fatalf("Allow while open: %v, want ErrOpen", err)
		}
	}
	if st := b.Stats(); st.Rejected != 5 || st.Opens != 1 || st.StateChanges != 1 || st.State != failover.StateOpen {
		t.Fatalf("stats = %+v", st)
	}
}

func TestBreakerHalfOpenLetsOneProbeThrough(t *testing.T) {
	var mu sync.Mutex
	var changes []string
	b := failover.NewBreaker(failover.BreakerConfig{
		MaxFailures: 1,
		Cooldown:    20 * time.Millisecond,
		OnStateChange: func(from, to failover.State) {
			mu.Lock()
			changes = append(changes, from.String()+"→"+to.String())
			mu.Unlock()
		},
	})
	mustAllow(t, b)(failover.Failure)
	if !eventually(2*time.Second, func() bool { return b.State() == failover.StateHalfOpen }) {
		t.Fatal("not half-open within 2s")
	}
	probe := mustAllow(t, b)
	if _, err := b.Allow(); !errors.Is(err, failover.ErrOpen) {
		t.Fatalf("second call while the probe is in flight: %v, want ErrOpen", err)
	}
	probe(failover.Ignored) // says nothing about health: the slot is free again
	mustAllow(t, b)(failover.Success)
	if s := b.State(); s != failover.StateClosed {
		t.Fatalf("after a successful probe: %s, want closed", s)
	}
	mu.Lock()
	got := fmt.Sprint(changes)
	mu.Unlock()
	if want := "[closed→open open→half-open half-open→closed]"; got != want {
		t.Fatalf("changes %s, want %s", got, want)
	}
}

func TestStateAndPolicyNames(t *testing.T) {
	for v, want := range map[fmt.Stringer]string{
		failover.StateClosed:   "closed",
		failover.StateHalfOpen: "half-open",
		failover.StateOpen:     "open",
		failover.State(9):      "State(9)",
		failover.Open:          "open",
		failover.Closed:        "closed",
		failover.LocalShare:    "local_share",
		failover.Policy(7):     "Policy(7)",
	} {
		if got := v.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}
