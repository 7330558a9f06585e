// The worked examples of local/steps_test.go, against a real server.

package remote_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/remote"
)

// t0 is 1:00:00, on a minute boundary (windows align to the Unix epoch).
var t0 = time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)

// hms is 1:mm:ss.
func hms(m, s int) time.Time {
	return t0.Add(time.Duration(m)*time.Minute + time.Duration(s)*time.Second)
}

// step is one call at an explicit instant and the full Decision it must get.
// n == 0 is a Peek.
type step struct {
	at         time.Time
	n          int64
	allowed    bool
	remaining  int64
	retryAfter time.Duration
	resetAfter time.Duration
	delay      time.Duration
}

const ms = time.Millisecond

func runSteps(t *testing.T, rule ringlimit.Rule, steps []step) {
	t.Helper()
	_, c := server(t)
	clk := testclock.New(t0)
	l := remote.New(c, remote.Config{Clock: clk})
	ctx := context.Background()
	for i, s := range steps {
		clk.Set(s.at)
		var d ringlimit.Decision
		var err error
		if s.n == 0 {
			d, err = l.Peek(ctx, "k", rule)
		} else {
			d, err = l.AllowN(ctx, "k", rule, s.n)
		}
		if err != nil {
			t.Fatalf("step %d at %s: %v", i, s.at.Format("15:04:05.000"), err)
		}
		want := ringlimit.Decision{Allowed: s.allowed, Limit: rule.Limit, Remaining: s.remaining,
			RetryAfter: s.retryAfter, ResetAfter: s.resetAfter, Delay: s.delay, Source: ringlimit.Store}
		if d != want {
			t.Errorf("step %d at %s n=%d:\n got %+v\nwant %+v", i, s.at.Format("15:04:05.000"), s.n, d, want)
		}
	}
}

// The first seed: a sliding log, 3 per minute. At 1:01:20 the 1:00:01 stamp
// has left the window, so the fourth passes; at 1:01:25 the window holds
// 1:00:30, 1:00:50 and 1:01:20, so the fifth is denied until 1:00:30 leaves.
func TestSeedSlidingLog(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 3, Window: time.Minute}
	runSteps(t, rule, []step{
		{at: hms(0, 1), n: 1, allowed: true, remaining: 2, resetAfter: 60 * time.Second},
		{at: hms(0, 30), n: 1, allowed: true, remaining: 1, resetAfter: 60 * time.Second},
		{at: hms(0, 50), n: 1, allowed: true, remaining: 0, resetAfter: 60 * time.Second},
		{at: hms(0, 55), n: 0, allowed: false, remaining: 0, retryAfter: 6 * time.Second, resetAfter: 55 * time.Second},
		{at: hms(1, 20), n: 1, allowed: true, remaining: 0, resetAfter: 60 * time.Second},
		{at: hms(1, 25), n: 1, allowed: false, remaining: 0, retryAfter: 5 * time.Second, resetAfter: 55 * time.Second},
		// Two hits need the two oldest (1:00:30, 1:00:50) gone: at 1:01:50.
		{at: hms(1, 31), n: 2, allowed: false, remaining: 1, retryAfter: 19 * time.Second, resetAfter: 49 * time.Second},
		{at: hms(1, 50), n: 2, allowed: true, remaining: 0, resetAfter: 60 * time.Second},
	})
}

// The second seed's sliding window counter: Limit 7, 5 hits in the previous
// window, 3 in the current one, 25 % into it: ⌊5 × 0.75⌋ + 3 + 1 = 7, allowed.
func TestSeedSlidingWindowCounter(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 7, Window: time.Minute}
	// ResetAfter is when the weighted count reaches zero: with c hits in the
	// current window, ⌈(c−1)·60000+1)/c⌉ ms into the next one (98.001 s after
	// 1:00:10 for 5 hits: ⌊5·11.999/60⌋ = 0).
	runSteps(t, rule, []step{
		{at: hms(0, 10), n: 5, allowed: true, remaining: 2, resetAfter: 98*time.Second + 1*ms},
		// 1:01:05: ⌊5·55/60⌋ = 4 from the previous window, + 3 = 7.
		{at: hms(1, 5), n: 3, allowed: true, remaining: 0, resetAfter: 95*time.Second + 1*ms},
		// 1:01:15, 25 % in: ⌊5·45/60⌋ = ⌊3.75⌋ = 3, + 3 + 1 = 7 ✓.
		{at: hms(1, 15), n: 1, allowed: true, remaining: 0, resetAfter: 90*time.Second + 1*ms},
		// Now 3 + 4 + 1 = 8 ✗. The previous window's weight drops to 2 at
		// 24.001 s into the window, ⌊5·35.999/60⌋ = 2: 9.001 s from now.
		{at: hms(1, 15), n: 1, allowed: false, remaining: 0, retryAfter: 9001 * ms, resetAfter: 90*time.Second + 1*ms},
		{at: hms(1, 24), n: 0, allowed: false, remaining: 0, retryAfter: 1 * ms, resetAfter: 81*time.Second + 1*ms},
		{at: hms(1, 24).Add(1 * ms), n: 1, allowed: true, remaining: 0, resetAfter: 84 * time.Second},
	})
}

// The second seed's warning about fixed windows: 5 per minute, yet 10 hits
// pass in 10 seconds across a boundary.
func TestSeedFixedWindowBoundaryBurst(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Minute}
	var steps []step
	for i := range 5 {
		steps = append(steps, step{at: hms(0, 55+i), n: 1, allowed: true, remaining: int64(4 - i), resetAfter: time.Duration(5-i) * time.Second})
	}
	for i := range 5 {
		steps = append(steps, step{at: hms(1, i), n: 1, allowed: true, remaining: int64(4 - i), resetAfter: time.Duration(60-i) * time.Second})
	}
	steps = append(steps,
		step{at: hms(1, 4), n: 1, allowed: false, remaining: 0, retryAfter: 56 * time.Second, resetAfter: 56 * time.Second},
		step{at: hms(2, 0), n: 5, allowed: true, remaining: 0, resetAfter: 60 * time.Second},
	)
	runSteps(t, rule, steps)
}

// Token bucket, 10 per second, Burst 5: the burst passes at once, then one
// token every 100 ms.
func TestTokenBucketBurstThenRefill(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 5}
	var steps []step
	for i := range 5 {
		steps = append(steps, step{at: t0, n: 1, allowed: true, remaining: int64(4 - i), resetAfter: time.Duration(i+1) * 100 * ms})
	}
	steps = append(steps,
		step{at: t0, n: 1, allowed: false, remaining: 0, retryAfter: 100 * ms, resetAfter: 500 * ms},
		step{at: t0.Add(99 * ms), n: 0, allowed: false, remaining: 0, retryAfter: 1 * ms, resetAfter: 401 * ms},
		step{at: t0.Add(100 * ms), n: 1, allowed: true, remaining: 0, resetAfter: 500 * ms},
		// 2.5 tokens back after 250 ms: two pass, a third would wait 50 ms.
		step{at: t0.Add(350 * ms), n: 3, allowed: false, remaining: 2, retryAfter: 50 * ms, resetAfter: 250 * ms},
		step{at: t0.Add(350 * ms), n: 2, allowed: true, remaining: 0, resetAfter: 450 * ms},
		step{at: t0.Add(2 * time.Second), n: 0, allowed: true, remaining: 5},
		step{at: t0.Add(2 * time.Second), n: 5, allowed: true, remaining: 0, resetAfter: 500 * ms},
	)
	runSteps(t, rule, steps)
}

// Leaky bucket, DESIGN's example: 10 per second (T = 100 ms), Burst 3.
func TestLeakyBucketQueue(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 10, Window: time.Second, Burst: 3}
	runSteps(t, rule, []step{
		{at: t0, n: 1, allowed: true, remaining: 2, resetAfter: 100 * ms, delay: 0},
		{at: t0, n: 1, allowed: true, remaining: 1, resetAfter: 200 * ms, delay: 100 * ms},
		{at: t0, n: 1, allowed: true, remaining: 0, resetAfter: 300 * ms, delay: 200 * ms},
		// Three wait (slots t0, t0+100, t0+200): a fourth does not fit until
		// the first has departed.
		{at: t0, n: 1, allowed: false, remaining: 0, retryAfter: 1 * ms, resetAfter: 300 * ms},
		{at: t0.Add(50 * ms), n: 1, allowed: true, remaining: 0, resetAfter: 350 * ms, delay: 250 * ms},
		{at: t0.Add(50 * ms), n: 1, allowed: false, remaining: 0, retryAfter: 51 * ms, resetAfter: 350 * ms},
		// After T one more fits, behind the queue.
		{at: t0.Add(150 * ms), n: 1, allowed: true, remaining: 0, resetAfter: 350 * ms, delay: 250 * ms},
		{at: t0.Add(2 * time.Second), n: 3, allowed: true, remaining: 0, resetAfter: 300 * ms, delay: 0},
	})
}

// The form of the leaky bucket example: a burst of Burst calls gets
// Delays 0, T, 2T, …; the next is denied; after T one more fits, T after the
// last.
func TestLeakyBucketBurstDelays(t *testing.T) {
	_, c := server(t)
	for _, tc := range []struct {
		limit, burst int64
		window       time.Duration
	}{{10, 3, time.Second}, {5, 5, time.Second}, {60, 10, time.Minute}, {1, 4, time.Second}} {
		key := fmt.Sprintf("k%d-%d-%s", tc.limit, tc.burst, tc.window)
		rule := ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: tc.limit, Window: tc.window, Burst: tc.burst}
		T := tc.window / time.Duration(tc.limit)
		clk := testclock.New(t0)
		l := remote.New(c, remote.Config{Clock: clk})
		ctx := context.Background()
		for i := range tc.burst {
			d, _ := l.AllowN(ctx, key, rule, 1)
			if !d.Allowed || d.Delay != time.Duration(i)*T {
				t.Fatalf("%+v: call %d: %+v, want allowed with Delay %s", rule, i, d, time.Duration(i)*T)
			}
		}
		if d, _ := l.AllowN(ctx, key, rule, 1); d.Allowed {
			t.Fatalf("%+v: call %d admitted past the burst: %+v", rule, tc.burst, d)
		}
		clk.Advance(T)
		d, _ := l.AllowN(ctx, key, rule, 1)
		if want := time.Duration(tc.burst-1) * T; !d.Allowed || d.Delay != want {
			t.Fatalf("%+v: after T: %+v, want allowed with Delay %s", rule, d, want)
		}
	}
}
