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

// fakeNow is a clock a test moves by hand.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) Now() time.Time  { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) set(t time.Time) { f.mu.Lock(); f.t = t; f.mu.Unlock() }

// TestBreakerOpensOnEvidence: refused or reset connections (Failure) open
// the breaker after MaxFailures in a row; timeouts only as a run of at
// least MaxFailures that spans MinSpan with no answer between. A slow
// answer is a Success and ends the run.
func TestBreakerOpensOnEvidence(t *testing.T) {
	const (
		F = failover.Failure
		T = failover.Timeout
		S = failover.Success
		I = failover.Ignored
	)
	type step struct {
		at   time.Duration // when the outcome is reported
		o    failover.Outcome
		want failover.State // after it
	}
	c, o := failover.StateClosed, failover.StateOpen
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"three refusals open it at once", []step{{0, F, c}, {ms, F, c}, {2 * ms, F, o}}},
		{"three quick timeouts do not", []step{{0, T, c}, {50 * ms, T, c}, {100 * ms, T, c}, {150 * ms, T, c}}},
		{"timeouts spanning 500 ms with no answer do", []step{{0, T, c}, {100 * ms, T, c}, {400 * ms, T, c}, {500 * ms, T, o}}},
		{"a span with too few timeouts does not", []step{{0, T, c}, {time.Second, T, c}}},
		{"a slow answer between ends the run", []step{{0, T, c}, {200 * ms, T, c}, {300 * ms, S, c}, {400 * ms, T, c}, {600 * ms, T, c}, {800 * ms, T, c}}},
		{"ignored calls neither end nor extend it", []step{{0, T, c}, {200 * ms, I, c}, {300 * ms, T, c}, {500 * ms, T, o}}},
		{"timeouts and a refusal: the span rule", []step{{0, T, c}, {10 * ms, F, c}, {20 * ms, T, c}, {30 * ms, F, c}, {500 * ms, T, o}}},
		{"refusals after timeouts: three refusals", []step{{0, T, c}, {10 * ms, F, c}, {20 * ms, F, c}, {30 * ms, F, o}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeNow{t: t0}
			b := failover.NewBreaker(failover.BreakerConfig{MaxFailures: 3, MinSpan: 500 * ms, Cooldown: time.Hour, Now: clk.Now})
			for i, s := range tc.steps {
				clk.set(t0.Add(s.at))
				mustAllow(t, b)(s.o)
				if got := b.State(); got != s.want {
					t.Fatalf("step %d (%s at %v): %s, want %s", i, s.o, s.at, got, s.want)
				}
			}
		})
	}
}

// TestBreakerTimedOutProbeReopens: a half-open breaker whose probe times
// out opens again (the span rule is for a closed breaker).
func TestBreakerTimedOutProbeReopens(t *testing.T) {
	b := failover.NewBreaker(failover.BreakerConfig{MaxFailures: 1, Cooldown: 20 * ms})
	mustAllow(t, b)(failover.Failure)
	if !eventually(2*time.Second, func() bool { return b.State() == failover.StateHalfOpen }) {
		t.Fatal("not half-open within 2s")
	}
	mustAllow(t, b)(failover.Timeout)
	if st := b.Stats(); st.Opens != 2 {
		t.Fatalf("after a timed-out probe: %+v, want a second open", st)
	}
}

// TestBreakerOverlappingCalls: calls let through while the breaker was
// healthy report after a run of failures began. A success among them ends
// the run (as one let through during it does); failures among them count
// into it; once open, a late report changes nothing.
func TestBreakerOverlappingCalls(t *testing.T) {
	b := failover.NewBreaker(failover.BreakerConfig{MaxFailures: 3, Cooldown: time.Hour})
	early := make([]func(failover.Outcome), 4)
	for i := range early {
		early[i] = mustAllow(t, b) // all made while healthy
	}
	mustAllow(t, b)(failover.Failure)
	mustAllow(t, b)(failover.Failure)
	early[0](failover.Success) // ends the run of two
	mustAllow(t, b)(failover.Failure)
	mustAllow(t, b)(failover.Failure)
	if s := b.State(); s != failover.StateClosed {
		t.Fatalf("two failures after a success: %s, want closed", s)
	}
	early[1](failover.Failure) // the third of the run
	if s := b.State(); s != failover.StateOpen {
		t.Fatalf("three failures in a run, one reported late: %s, want open", s)
	}
	early[2](failover.Success) // made before it opened: no effect on the open breaker
	early[3](failover.Failure)
	if st := b.Stats(); st.State != failover.StateOpen || st.Opens != 1 || st.StateChanges != 1 {
		t.Fatalf("late reports changed the open breaker: %+v", st)
	}
}

// TestHealthyBreakerAllocatesNothing: a call through a healthy breaker, and
// its report, allocate nothing; one in a run of failures may.
func TestHealthyBreakerAllocatesNothing(t *testing.T) {
	b := failover.NewBreaker(failover.BreakerConfig{MaxFailures: 1000, MinSpan: time.Hour})
	if a := testing.AllocsPerRun(100, func() {
		done, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		done(failover.Success)
	}); a != 0 {
		t.Fatalf("a healthy call allocates %v times", a)
	}
	mustAllow(t, b)(failover.Timeout) // a run begins: gobreaker is asked again
	mustAllow(t, b)(failover.Success)
	if a := testing.AllocsPerRun(100, func() { mustAllow(t, b)(failover.Success) }); a != 0 {
		t.Fatalf("after the run ended, a healthy call allocates %v times", a)
	}
}

// TestLateFailureTakesNoProbe: a failure reported by a call let through
// while the breaker was healthy, after it opened and its cooldown passed,
// neither takes the half-open breaker's probe nor reopens it.
func TestLateFailureTakesNoProbe(t *testing.T) {
	b := failover.NewBreaker(failover.BreakerConfig{MaxFailures: 1, Cooldown: 20 * time.Millisecond})
	early := mustAllow(t, b)
	mustAllow(t, b)(failover.Failure)
	if !eventually(2*time.Second, func() bool { return b.State() == failover.StateHalfOpen }) {
		t.Fatal("not half-open within 2s")
	}
	early(failover.Failure)
	if s := b.State(); s != failover.StateHalfOpen {
		t.Fatalf("after a late failure: %s, want half-open still", s)
	}
	mustAllow(t, b)(failover.Success) // the probe
	if s := b.State(); s != failover.StateClosed {
		t.Fatalf("after the probe's success: %s, want closed", s)
	}
}
