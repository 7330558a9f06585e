// Package seedsteps holds the worked examples of the seed articles and the
// DESIGN, as tables of calls at explicit instants with the full Decision each
// must get, and runs them against any ringlimit.Limiter: local and remote
// must both pass the very same rows.
package seedsteps

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
)

// T0 is 1:00:00, on a minute boundary (windows align to the Unix epoch).
var T0 = time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)

// hms is 1:mm:ss.
func hms(m, s int) time.Time {
	return T0.Add(time.Duration(m)*time.Minute + time.Duration(s)*time.Second)
}

var t0 = T0 // the tables say t0

const ms = time.Millisecond

// Step is one call at an explicit instant and the full Decision it must get
// (Limit is the rule's). N == 0 is a Peek.
type Step struct {
	At         time.Time
	N          int64
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
}

// Case is a rule and its steps, on one key.
type Case struct {
	Name  string
	Rule  ringlimit.Rule
	Steps []Step
}

// Cases returns every table.
func Cases() []Case {
	return []Case{seedSlidingLog(), seedSlidingWindowCounter(), seedFixedWindowBoundaryBurst(), tokenBucketBurstThenRefill(), leakyBucketQueue()}
}

// Run runs every case as a subtest, each on a Limiter that newLimiter makes
// on a manual clock, and expects Source source in every Decision.
func Run(t *testing.T, source ringlimit.Source, newLimiter func(t *testing.T, clk ringlimit.Clock) ringlimit.Limiter) {
	RunCases(t, Cases(), source, newLimiter)
}

// RunCases is Run for the given cases.
func RunCases(t *testing.T, cases []Case, source ringlimit.Source, newLimiter func(t *testing.T, clk ringlimit.Clock) ringlimit.Limiter) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			clk := testclock.New(T0)
			l := newLimiter(t, clk)
			ctx := context.Background()
			for i, s := range c.Steps {
				clk.Set(s.At)
				var d ringlimit.Decision
				var err error
				if s.N == 0 {
					d, err = l.Peek(ctx, "k", c.Rule)
				} else {
					d, err = l.AllowN(ctx, "k", c.Rule, s.N)
				}
				if err != nil {
					t.Fatalf("step %d at %s: %v", i, s.At.Format("15:04:05.000"), err)
				}
				want := ringlimit.Decision{Allowed: s.Allowed, Limit: c.Rule.Limit, Remaining: s.Remaining,
					RetryAfter: s.RetryAfter, ResetAfter: s.ResetAfter, Delay: s.Delay, Source: source}
				if d != want {
					t.Errorf("step %d at %s n=%d:\n got %+v\nwant %+v", i, s.At.Format("15:04:05.000"), s.N, d, want)
				}
			}
		})
	}
}

// RunLeakyBurst checks the form of the leaky bucket example for
// several rules: a burst of Burst calls gets Delays 0, T, 2T, …; the next is
// denied; after T one more fits, T after the last.
func RunLeakyBurst(t *testing.T, newLimiter func(t *testing.T, clk ringlimit.Clock) ringlimit.Limiter) {
	for _, tc := range []struct {
		limit, burst int64
		window       time.Duration
	}{{10, 3, time.Second}, {5, 5, time.Second}, {60, 10, time.Minute}, {1, 4, time.Second}} {
		rule := ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: tc.limit, Window: tc.window, Burst: tc.burst}
		T := tc.window / time.Duration(tc.limit)
		clk := testclock.New(T0)
		l := newLimiter(t, clk)
		ctx := context.Background()
		for i := range tc.burst {
			d, _ := l.AllowN(ctx, "k", rule, 1)
			if !d.Allowed || d.Delay != time.Duration(i)*T {
				t.Fatalf("%+v: call %d: %+v, want allowed with Delay %s", rule, i, d, time.Duration(i)*T)
			}
		}
		if d, _ := l.AllowN(ctx, "k", rule, 1); d.Allowed {
			t.Fatalf("%+v: call %d admitted past the burst: %+v", rule, tc.burst, d)
		}
		clk.Advance(T)
		d, _ := l.AllowN(ctx, "k", rule, 1)
		if want := time.Duration(tc.burst-1) * T; !d.Allowed || d.Delay != want {
			t.Fatalf("%+v: after T: %+v, want allowed with Delay %s", rule, d, want)
		}
	}
}

// The first seed: a sliding log, 3 per minute. At 1:01:20 the 1:00:01 stamp
// has left the window, so the fourth passes; at 1:01:25 the window holds
// 1:00:30, 1:00:50 and 1:01:20, so the fifth is denied until 1:00:30 leaves.
func seedSlidingLog() Case {
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 3, Window: time.Minute}
	return Case{Name: "SeedSlidingLog", Rule: rule, Steps: []Step{
		{At: hms(0, 1), N: 1, Allowed: true, Remaining: 2, ResetAfter: 60 * time.Second},
		{At: hms(0, 30), N: 1, Allowed: true, Remaining: 1, ResetAfter: 60 * time.Second},
		{At: hms(0, 50), N: 1, Allowed: true, Remaining: 0, ResetAfter: 60 * time.Second},
		{At: hms(0, 55), N: 0, Allowed: false, Remaining: 0, RetryAfter: 6 * time.Second, ResetAfter: 55 * time.Second},
		{At: hms(1, 20), N: 1, Allowed: true, Remaining: 0, ResetAfter: 60 * time.Second},
		{At: hms(1, 25), N: 1, Allowed: false, Remaining: 0, RetryAfter: 5 * time.Second, ResetAfter: 55 * time.Second},
		// Two hits need the two oldest (1:00:30, 1:00:50) gone: at 1:01:50.
		{At: hms(1, 31), N: 2, Allowed: false, Remaining: 1, RetryAfter: 19 * time.Second, ResetAfter: 49 * time.Second},
		{At: hms(1, 50), N: 2, Allowed: true, Remaining: 0, ResetAfter: 60 * time.Second},
	}}
}

// The second seed's sliding window counter: Limit 7, 5 hits in the previous
// window, 3 in the current one, 25 % into it: ⌊5 × 0.75⌋ + 3 + 1 = 7, allowed.
func seedSlidingWindowCounter() Case {
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 7, Window: time.Minute}
	// ResetAfter is when the weighted count reaches zero: with c hits in the
	// current window, ⌈((c−1)·60000+1)/c⌉ ms into the next one (98.001 s after
	// 1:00:10 for 5 hits: ⌊5·11.999/60⌋ = 0).
	return Case{Name: "SeedSlidingWindowCounter", Rule: rule, Steps: []Step{
		{At: hms(0, 10), N: 5, Allowed: true, Remaining: 2, ResetAfter: 98*time.Second + 1*ms},
		// 1:01:05: ⌊5·55/60⌋ = 4 from the previous window, + 3 = 7.
		{At: hms(1, 5), N: 3, Allowed: true, Remaining: 0, ResetAfter: 95*time.Second + 1*ms},
		// 1:01:15, 25 % in: ⌊5·45/60⌋ = ⌊3.75⌋ = 3, + 3 + 1 = 7 ✓.
		{At: hms(1, 15), N: 1, Allowed: true, Remaining: 0, ResetAfter: 90*time.Second + 1*ms},
		// Now 3 + 4 + 1 = 8 ✗. The previous window's weight drops to 2 at
		// 24.001 s into the window, ⌊5·35.999/60⌋ = 2: 9.001 s from now.
		{At: hms(1, 15), N: 1, Allowed: false, Remaining: 0, RetryAfter: 9001 * ms, ResetAfter: 90*time.Second + 1*ms},
		{At: hms(1, 24), N: 0, Allowed: false, Remaining: 0, RetryAfter: 1 * ms, ResetAfter: 81*time.Second + 1*ms},
		{At: hms(1, 24).Add(1 * ms), N: 1, Allowed: true, Remaining: 0, ResetAfter: 84 * time.Second},
	}}
}

// The second seed's warning about fixed windows: 5 per minute, yet 10 hits
// pass in 10 seconds across a boundary.
func seedFixedWindowBoundaryBurst() Case {
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Minute}
	var steps []Step
	for i := range 5 {
		steps = append(steps, Step{At: hms(0, 55+i), N: 1, Allowed: true, Remaining: int64(4 - i), ResetAfter: time.Duration(5-i) * time.Second})
	}
	for i := range 5 {
		steps = append(steps, Step{At: hms(1, i), N: 1, Allowed: true, Remaining: int64(4 - i), ResetAfter: time.Duration(60-i) * time.Second})
	}
	steps = append(steps,
		Step{At: hms(1, 4), N: 1, Allowed: false, Remaining: 0, RetryAfter: 56 * time.Second, ResetAfter: 56 * time.Second},
		Step{At: hms(2, 0), N: 5, Allowed: true, Remaining: 0, ResetAfter: 60 * time.Second},
	)
	return Case{Name: "SeedFixedWindowBoundaryBurst", Rule: rule, Steps: steps}
}

// Token bucket, 10 per second, Burst 5: the burst passes at once, then one
// token every 100 ms.
func tokenBucketBurstThenRefill() Case {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 5}
	var steps []Step
	for i := range 5 {
		steps = append(steps, Step{At: t0, N: 1, Allowed: true, Remaining: int64(4 - i), ResetAfter: time.Duration(i+1) * 100 * ms})
	}
	steps = append(steps,
		Step{At: t0, N: 1, Allowed: false, Remaining: 0, RetryAfter: 100 * ms, ResetAfter: 500 * ms},
		Step{At: t0.Add(99 * ms), N: 0, Allowed: false, Remaining: 0, RetryAfter: 1 * ms, ResetAfter: 401 * ms},
		Step{At: t0.Add(100 * ms), N: 1, Allowed: true, Remaining: 0, ResetAfter: 500 * ms},
		// 2.5 tokens back after 250 ms: two pass, a third would wait 50 ms.
		Step{At: t0.Add(350 * ms), N: 3, Allowed: false, Remaining: 2, RetryAfter: 50 * ms, ResetAfter: 250 * ms},
		Step{At: t0.Add(350 * ms), N: 2, Allowed: true, Remaining: 0, ResetAfter: 450 * ms},
		Step{At: t0.Add(2 * time.Second), N: 0, Allowed: true, Remaining: 5},
		Step{At: t0.Add(2 * time.Second), N: 5, Allowed: true, Remaining: 0, ResetAfter: 500 * ms},
	)
	return Case{Name: "TokenBucketBurstThenRefill", Rule: rule, Steps: steps}
}

// Leaky bucket, DESIGN's example: 10 per second (T = 100 ms), Burst 3.
func leakyBucketQueue() Case {
	rule := ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 10, Window: time.Second, Burst: 3}
	return Case{Name: "LeakyBucketQueue", Rule: rule, Steps: []Step{
		{At: t0, N: 1, Allowed: true, Remaining: 2, ResetAfter: 100 * ms, Delay: 0},
		{At: t0, N: 1, Allowed: true, Remaining: 1, ResetAfter: 200 * ms, Delay: 100 * ms},
		{At: t0, N: 1, Allowed: true, Remaining: 0, ResetAfter: 300 * ms, Delay: 200 * ms},
		// Three wait (slots t0, t0+100, t0+200): a fourth does not fit until
		// the first has departed.
		{At: t0, N: 1, Allowed: false, Remaining: 0, RetryAfter: 1 * ms, ResetAfter: 300 * ms},
		{At: t0.Add(50 * ms), N: 1, Allowed: true, Remaining: 0, ResetAfter: 350 * ms, Delay: 250 * ms},
		{At: t0.Add(50 * ms), N: 1, Allowed: false, Remaining: 0, RetryAfter: 51 * ms, ResetAfter: 350 * ms},
		// After T one more fits, behind the queue.
		{At: t0.Add(150 * ms), N: 1, Allowed: true, Remaining: 0, ResetAfter: 350 * ms, Delay: 250 * ms},
		{At: t0.Add(2 * time.Second), N: 3, Allowed: true, Remaining: 0, ResetAfter: 300 * ms, Delay: 0},
	}}
}
