package failover_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
)

var (
	ctx      = context.Background()
	perMin30 = ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 30, Window: time.Minute}
	bucket   = ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 100, Window: time.Second, Burst: 20}
)

// openBreaker makes MaxFailures failing calls and checks the breaker opened.
func openBreaker(t *testing.T, l *failover.Limiter, f *fake, maxFailures int) {
	t.Helper()
	f.set(fail)
	for range maxFailures {
		if _, err := l.AllowN(ctx, "k", perMin30, 1); err != nil {
			t.Fatalf("AllowN with the store failing: %v", err)
		}
	}
	if s := l.State(); s != failover.StateOpen {
		t.Fatalf("after %d failures the breaker is %s, want open", maxFailures, s)
	}
}

func TestHealthyCallsGoToPrimary(t *testing.T) {
	f := newFake()
	l := failover.New(f, failover.Config{})
	d, err := l.AllowN(ctx, "k", perMin30, 3)
	if err != nil || d.Source != ringlimit.Store || d.Remaining != 27 {
		t.Fatalf("AllowN = %+v, %v; want the primary's decision", d, err)
	}
	if d, err = l.Peek(ctx, "k", perMin30); err != nil || d.Source != ringlimit.Store {
		t.Fatalf("Peek = %+v, %v; want the primary's decision", d, err)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if got := f.calls.Load(); got != 3 {
		t.Fatalf("primary got %d calls, want 3", got)
	}
}

func TestPolicies(t *testing.T) {
	tests := []struct {
		policy failover.Policy
		rule   ringlimit.Rule
		n      int64
		peek   bool
		want   ringlimit.Decision
	}{
		{failover.Open, perMin30, 4, false, ringlimit.Decision{Allowed: true, Limit: 30, Remaining: 26, Source: ringlimit.Fallback}},
		{failover.Open, bucket, 5, false, ringlimit.Decision{Allowed: true, Limit: 100, Remaining: 15, Source: ringlimit.Fallback}},
		{failover.Open, perMin30, 0, true, ringlimit.Decision{Allowed: true, Limit: 30, Remaining: 30, Source: ringlimit.Fallback}},
		{failover.Closed, perMin30, 1, false, ringlimit.Decision{Limit: 30, RetryAfter: 250 * time.Millisecond, ResetAfter: 250 * time.Millisecond, Source: ringlimit.Fallback}},
		{failover.Closed, perMin30, 0, true, ringlimit.Decision{Limit: 30, RetryAfter: 250 * time.Millisecond, ResetAfter: 250 * time.Millisecond, Source: ringlimit.Fallback}},
		// Share 3: Limit 30 → 10 for this node.
		{failover.LocalShare, perMin30, 4, false, ringlimit.Decision{Allowed: true, Limit: 10, Remaining: 6, ResetAfter: 60 * time.Second, Source: ringlimit.Fallback}},
		// n over the share's capacity is clamped: it takes the whole share.
		{failover.LocalShare, perMin30, 25, false, ringlimit.Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 60 * time.Second, Source: ringlimit.Fallback}},
		{failover.LocalShare, perMin30, 0, true, ringlimit.Decision{Allowed: true, Limit: 10, Remaining: 10, Source: ringlimit.Fallback}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/n=%d/peek=%t", tt.policy, tt.n, tt.peek), func(t *testing.T) {
			f := newFake()
			clk := testclock.New(time.Unix(1_700_000_040, 0)) // a whole minute: fixed windows start here
			l := failover.New(f, failover.Config{
				Policy:   tt.policy,
				Cooldown: 249500 * time.Microsecond, // rounds up to 250 ms
				Local:    local.New(local.Config{Clock: clk}),
				Share:    func() int { return 3 },
			})
			f.failWith(errStoreDown)
			var d ringlimit.Decision
			var err error
			if tt.peek {
				d, err = l.Peek(ctx, "k", tt.rule)
			} else {
				d, err = l.AllowN(ctx, "k", tt.rule, tt.n)
			}
			if err != nil {
				t.Fatalf("err = %v, want a fallback decision", err)
			}
			if d != tt.want {
				t.Fatalf("decision = %+v\nwant       %+v", d, tt.want)
			}
		})
	}
}

// LocalShare with Share() = 3 and Limit 30 admits exactly 10 per window.
func TestLocalShareAdmitsTheShare(t *testing.T) {
	f := newFake()
	f.failWith(errStoreDown)
	clk := testclock.New(time.Unix(1_700_000_040, 0))
	nodes := 3
	l := failover.New(f, failover.Config{
		Policy: failover.LocalShare,
		Local:  local.New(local.Config{Clock: clk}),
		Share:  func() int { return nodes },
	})
	for window := range 3 {
		admitted := 0
		for range 50 {
			d, err := l.AllowN(ctx, "k", perMin30, 1)
			if err != nil {
				t.Fatalf("window %d: %v", window, err)
			}
			if d.Source != ringlimit.Fallback {
				t.Fatalf("window %d: Source %s, want fallback", window, d.Source)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 10 {
			t.Fatalf("window %d: admitted %d of 50, want 10 (30 shared by 3)", window, admitted)
		}
		clk.Advance(time.Minute)
	}
	// A share never rounds to zero: 30 shared by 100 nodes is 1 each.
	nodes = 100
	if d, _ := l.AllowN(ctx, "k2", perMin30, 1); !d.Allowed || d.Limit != 1 {
		t.Fatalf("share of 30 over 100 nodes: %+v, want allowed with Limit 1", d)
	}
	if st := l.Stats(); st.FallbackLocalShare != 151 || st.FallbackOpen != 0 {
		t.Fatalf("stats = %+v, want 151 LocalShare fallbacks", st)
	}
}

func TestLocalShareWithoutLocalIsOpen(t *testing.T) {
	f := newFake()
	f.failWith(errStoreDown)
	l := failover.New(f, failover.Config{Policy: failover.LocalShare, Share: func() int { return 3 }})
	for range 40 {
		if d, err := l.AllowN(ctx, "k", perMin30, 1); err != nil || !d.Allowed || d.Source != ringlimit.Fallback {
			t.Fatalf("AllowN = %+v, %v; want an Open fallback", d, err)
		}
	}
	if st := l.Stats(); st.FallbackOpen != 40 {
		t.Fatalf("FallbackOpen = %d, want 40", st.FallbackOpen)
	}
}

func TestNilPrimaryDecidesByPolicy(t *testing.T) {
	l := failover.New(nil, failover.Config{Policy: failover.Closed})
	if d, err := l.AllowN(ctx, "k", perMin30, 1); err != nil || d.Allowed || d.Source != ringlimit.Fallback {
		t.Fatalf("AllowN = %+v, %v; want a Closed fallback", d, err)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatalf("Reset: %v", err)
	}
}

func TestBreakerOpensAndProbes(t *testing.T) {
	f := newFake()
	var mu sync.Mutex
	var changes []string
	l := failover.New(f, failover.Config{
		MaxFailures: 3,
		Cooldown:    50 * time.Millisecond,
		OnStateChange: func(from, to failover.State) {
			mu.Lock()
			changes = append(changes, from.String()+"→"+to.String())
			mu.Unlock()
		},
	})
	f.set(fail)
	for i := range 2 {
		l.AllowN(ctx, "k", perMin30, 1)
		if s := l.State(); s != failover.StateClosed {
			t.Fatalf("after %d failures: %s, want closed", i+1, s)
		}
	}
	l.AllowN(ctx, "k", perMin30, 1)
	if s := l.State(); s != failover.StateOpen {
		t.Fatalf("after 3 failures: %s, want open", s)
	}
	before := f.calls.Load()
	for range 100 {
		if d, err := l.AllowN(ctx, "k", perMin30, 1); err != nil || !d.Allowed || d.Source != ringlimit.Fallback {
			t.Fatalf("open: %+v, %v; want an Open fallback", d, err)
		}
	}
	if got := f.calls.Load() - before; got != 0 {
		t.Fatalf("open breaker let %d calls through to the primary", got)
	}
	// The store is back; after the cooldown one probe closes the breaker.
	f.set(answer)
	if !eventually(2*time.Second, func() bool {
		d, _ := l.AllowN(ctx, "k", perMin30, 1)
		return d.Source == ringlimit.Store
	}) {
		t.Fatal("no decision from the store within 2s of its return")
	}
	if s := l.State(); s != failover.StateClosed {
		t.Fatalf("after a successful probe: %s, want closed", s)
	}
	mu.Lock()
	got := fmt.Sprint(changes)
	mu.Unlock()
	if want := "[closed→open open→half-open half-open→closed]"; got != want {
		t.Fatalf("state changes %s, want %s", got, want)
	}
	st := l.Stats()
	if st.StateChanges != 3 || st.Opens != 1 || st.PrimaryErrors != 3 || st.Rejected < 100 || st.FallbackOpen < 103 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestFailedProbeReopens(t *testing.T) {
	f := newFake()
	l := failover.New(f, failover.Config{MaxFailures: 1, Cooldown: 20 * time.Millisecond})
	openBreaker(t, l, f, 1)
	if !eventually(2*time.Second, func() bool { return l.State() == failover.StateHalfOpen }) {
		t.Fatal("not half-open within 2s")
	}
	before := f.calls.Load()
	l.AllowN(ctx, "k", perMin30, 1) // the probe fails
	if s := l.State(); s != failover.StateOpen {
		t.Fatalf("after a failed probe: %s, want open", s)
	}
	if got := f.calls.Load() - before; got != 1 {
		t.Fatalf("half-open let %d calls through, want 1", got)
	}
}

func TestTimeoutBoundsEachCall(t *testing.T) {
	f := newFake()
	f.set(hang)
	const timeout = 30 * time.Millisecond
	l := failover.New(f, failover.Config{Timeout: timeout, MaxFailures: 2})
	lag := stalls(t)
	for i := range 2 {
		// The caller's deadline is far away: Timeout must bound the call.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		start := time.Now()
		d, err := l.AllowN(cctx, "k", perMin30, 1)
		end := time.Now()
		cancel()
		if err != nil || d.Source != ringlimit.Fallback {
			t.Fatalf("call %d: %+v, %v; want a fallback", i, d, err)
		}
		// (Less the time this process did not run: beside busy loops a
		// call took 82 ms, most of it waiting for a CPU.)
		took, stalled := end.Sub(start), lag.StalledSince(start, end)
		if took < timeout || took-stalled > timeout+50*time.Millisecond {
			t.Fatalf("call %d took %s (%s of it descheduled), want about the timeout %s", i, took, stalled, timeout)
		}
	}
	// Two timeouts 30 ms apart are not evidence of failure (MinSpan 500 ms).
	if st := l.Stats(); st.Timeouts != 2 || st.PrimaryErrors != 0 || st.State != failover.StateClosed {
		t.Fatalf("stats = %+v, want 2 timeouts and a closed breaker", st)
	}
}

func TestCanceledCallerIsNotAStoreFailure(t *testing.T) {
	f := newFake()
	f.set(hang)
	l := failover.New(f, failover.Config{Timeout: time.Second, MaxFailures: 2})
	for i := range 5 {
		// The caller's own deadline is shorter than Timeout.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
		_, err := l.AllowN(cctx, "k", perMin30, 1)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d: err = %v, want the caller's context.DeadlineExceeded", i, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.AllowN(cctx, "k", perMin30, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: err = %v, want context.Canceled", err)
	}
	if err := l.Reset(cctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Reset: err = %v, want context.Canceled", err)
	}
	st := l.Stats()
	if st.State != failover.StateClosed || st.Timeouts != 0 || st.PrimaryErrors != 0 || st.Canceled != 7 {
		t.Fatalf("stats = %+v, want closed, no failures, 7 cancelled", st)
	}
	// The error value alone decides nothing: a primary that fails with
	// context.Canceled while the caller's context is live is a failure.
	f.failWith(context.Canceled)
	for range 2 {
		if d, err := l.AllowN(ctx, "k", perMin30, 1); err != nil || d.Source != ringlimit.Fallback {
			t.Fatalf("primary fails with context.Canceled: %+v, %v; want a fallback", d, err)
		}
	}
	if s := l.State(); s != failover.StateOpen {
		t.Fatalf("after 2 primary failures: %s, want open", s)
	}
}

// A cancelled probe frees the half-open slot: the next call probes.
func TestCanceledProbeFreesTheSlot(t *testing.T) {
	f := newFake()
	l := failover.New(f, failover.Config{MaxFailures: 1, Cooldown: 20 * time.Millisecond, Timeout: time.Second})
	openBreaker(t, l, f, 1)
	if !eventually(2*time.Second, func() bool { return l.State() == failover.StateHalfOpen }) {
		t.Fatal("not half-open within 2s")
	}
	f.set(hang)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	if _, err := l.AllowN(cctx, "k", perMin30, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled probe: %v", err)
	}
	cancel()
	f.set(answer)
	if d, err := l.AllowN(ctx, "k", perMin30, 1); err != nil || d.Source != ringlimit.Store {
		t.Fatalf("next call after a cancelled probe: %+v, %v; want the store's decision", d, err)
	}
	if s := l.State(); s != failover.StateClosed {
		t.Fatalf("%s, want closed", s)
	}
}

func TestBadInputIsReturnedAsIs(t *testing.T) {
	f := newFake()
	f.failWith(errStoreDown) // were bad input sent on, it would fall back
	l := failover.New(f, failover.Config{MaxFailures: 1})
	bad := []struct {
		key  string
		rule ringlimit.Rule
		n    int64
		want error
	}{
		{"", perMin30, 1, ringlimit.ErrInvalidKey},
		{"k", ringlimit.Rule{Limit: 0, Window: time.Second}, 1, ringlimit.ErrInvalidRule},
		{"k", perMin30, -1, ringlimit.ErrInvalidHits},
		{"k", perMin30, 31, ringlimit.ErrInvalidHits},
	}
	for _, b := range bad {
		if _, err := l.AllowN(ctx, b.key, b.rule, b.n); !errors.Is(err, b.want) {
			t.Fatalf("AllowN(%q, %+v, %d) err = %v, want %v", b.key, b.rule, b.n, err, b.want)
		}
	}
	if _, err := l.Peek(ctx, "k", ringlimit.Rule{}); !errors.Is(err, ringlimit.ErrInvalidRule) {
		t.Fatalf("Peek with a zero rule: %v", err)
	}
	if err := l.Reset(ctx, ""); !errors.Is(err, ringlimit.ErrInvalidKey) {
		t.Fatalf("Reset(\"\"): %v", err)
	}
	if got := f.calls.Load(); got != 0 {
		t.Fatalf("bad input reached the primary %d times", got)
	}
	// The primary's own refusals (its validation is stricter, or it is
	// closed) come back as they are and count nothing.
	for _, want := range []error{ringlimit.ErrInvalidRule, ringlimit.ErrInvalidKey, ringlimit.ErrInvalidHits, ringlimit.ErrClosed} {
		f.failWith(fmt.Errorf("fake: refused: %w", want))
		for range 3 {
			if _, err := l.AllowN(ctx, "k", perMin30, 1); !errors.Is(err, want) {
				t.Fatalf("primary refuses with %v: got %v", want, err)
			}
		}
	}
	st := l.Stats()
	if st.State != failover.StateClosed || st.PrimaryErrors != 0 || st.FallbackOpen != 0 {
		t.Fatalf("stats = %+v, want closed with no failures or fallbacks", st)
	}
}

func TestPanickingPrimaryIsAFailure(t *testing.T) {
	f := newFake()
	f.set(panics)
	l := failover.New(f, failover.Config{MaxFailures: 1})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the primary's panic was swallowed")
			}
		}()
		l.AllowN(ctx, "k", perMin30, 1)
	}()
	if s := l.State(); s != failover.StateOpen {
		t.Fatalf("after a panic: %s, want open", s)
	}
}

func TestResetWhileDownIsDropped(t *testing.T) {
	f := newFake()
	clk := testclock.New(time.Unix(1_700_000_040, 0))
	loc := local.New(local.Config{Clock: clk})
	l := failover.New(f, failover.Config{MaxFailures: 2, Policy: failover.LocalShare, Local: loc})
	f.failWith(errStoreDown)
	if d, _ := l.AllowN(ctx, "k", perMin30, 30); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("fallback took %+v, want the whole share", d)
	}
	if err := l.Reset(ctx, "k"); err != nil { // fails: the second failure opens the breaker
		t.Fatalf("Reset with the store failing: %v", err)
	}
	if err := l.Reset(ctx, "k"); err != nil { // rejected while open
		t.Fatalf("Reset with the breaker open: %v", err)
	}
	st := l.Stats()
	if st.ResetsDropped != 2 || st.State != failover.StateOpen {
		t.Fatalf("stats = %+v, want 2 resets dropped and an open breaker", st)
	}
	// The local share forgot the key all the same.
	if d, _ := l.AllowN(ctx, "k", perMin30, 1); !d.Allowed || d.Remaining != 29 {
		t.Fatalf("after Reset: %+v, want a fresh share", d)
	}
}

func TestOpenPathAllocatesNothing(t *testing.T) {
	for _, p := range []failover.Policy{failover.Open, failover.Closed} {
		f := newFake()
		l := failover.New(f, failover.Config{Policy: p, Cooldown: time.Hour, MaxFailures: 1})
		openBreaker(t, l, f, 1)
		if a := testing.AllocsPerRun(1000, func() { l.AllowN(ctx, "k", perMin30, 1) }); a != 0 {
			t.Errorf("%s: %v allocs per decision with the breaker open, want 0", p, a)
		}
	}
}
