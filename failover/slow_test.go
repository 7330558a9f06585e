package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
)

// warm gives l's estimator fast answers until its timeout is down to the
// floor plus the lag.
func warm(t *testing.T, l *failover.Limiter, f *fake) {
	t.Helper()
	f.delay.Store(0)
	for range 20 {
		if d, err := l.AllowN(ctx, "k", perMin30, 0); err != nil || d.Source != ringlimit.Store {
			t.Fatalf("warming: %+v, %v", d, err)
		}
	}
}

// A primary that turns slow but answers is waited for: the effective
// timeout follows its latency (after a few timeouts, each doubling it), and
// its timeouts, quick and few, do not open the breaker.
func TestSlowPrimaryIsWaitedFor(t *testing.T) {
	f := newFake()
	lag := new(failover.Lag)
	l := failover.New(f, failover.Config{Timeout: time.Second, Floor: 5 * ms, Lag: lag, MaxFailures: 3})
	warm(t, l, f)
	if got := l.Stats().Timeout; got >= 50*ms {
		t.Fatalf("after fast answers the timeout is %v, want near the 5 ms floor", got)
	}
	// The primary now takes 60 ms an answer (a pause, a slow disk): more
	// than the learnt timeout, far less than the ceiling. Every call here
	// starts after the last ended, so the runs of timeouts are short.
	f.delay.Store(int64(60 * ms))
	fallbacks, store := 0, 0
	for range 12 {
		d, err := l.AllowN(ctx, "k", perMin30, 0)
		if err != nil {
			t.Fatal(err)
		}
		switch d.Source {
		case ringlimit.Fallback:
			fallbacks++
		case ringlimit.Store:
			store++
		}
	}
	st := l.Stats()
	t.Logf("slow primary: %d store, %d fallback decisions; stats %+v", store, fallbacks, st)
	// From a timeout of at most 5 ms plus RTTVAR's share, doublings reach
	// 60 ms within 4 timeouts; a machine that delays the answers further
	// (the lag is not measured here: nothing ticks it) adds no more than
	// one doubling.
	if fallbacks > 5 {
		t.Fatalf("%d of 12 calls fell back; want at most 5 before the timeout reaches the primary's latency", fallbacks)
	}
	if st.Opens != 0 {
		t.Fatalf("the breaker opened on a primary that answers: %+v", st)
	}
}

// The lag this process's timers showed lately (the injected lag: a tick
// that fired 60 ms late just before the call) widens the timeout: a primary
// that answers in 40 ms, beyond the learnt 5 ms, is waited for, and the
// caller gets the store's decision. Without the lag, the call times out.
func TestLagWidensTheTimeout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stall    bool
		wantFrom ringlimit.Source
	}{
		{"descheduled 60 ms lately: waited for", true, ringlimit.Store},
		{"not descheduled: timed out", false, ringlimit.Fallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			lag := new(failover.Lag)
			l := failover.New(f, failover.Config{Timeout: time.Second, Floor: 5 * ms, Lag: lag})
			warm(t, l, f)
			if tc.stall {
				now := time.Now()
				lag.Tick(now.Add(-60*ms), now)
			}
			// A loaded machine that delays the 5 ms timer by 35 ms more
			// than the noise would also wait for the answer here (a stall
			// it sees): the "timed out" row holds while timers fire within
			// 30 ms.
			f.delay.Store(int64(40 * ms))
			d, err := l.AllowN(ctx, "k", perMin30, 0)
			if err != nil || d.Source != tc.wantFrom {
				t.Fatalf("got %+v, %v; want Source %s", d, err, tc.wantFrom)
			}
		})
	}
}

// The caller's deadline wins over the timeout the lag widened.
func TestCallerDeadlineWinsOverLag(t *testing.T) {
	f := newFake()
	lag := new(failover.Lag)
	l := failover.New(f, failover.Config{Timeout: time.Second, Floor: 5 * ms, Lag: lag})
	warm(t, l, f)
	now := time.Now()
	lag.Tick(now.Add(-500*ms), now)
	f.delay.Store(int64(400 * ms))
	cctx, cancel := context.WithTimeout(ctx, 30*ms)
	defer cancel()
	start := time.Now()
	_, err := l.AllowN(cctx, "k", perMin30, 0)
	// 30 ms deadline against a 400 ms answer and a 505 ms timeout: the call
	// returns at the deadline; the bound leaves 300 ms for a loaded machine
	// to run it.
	if err != context.DeadlineExceeded || time.Since(start) > 330*ms {
		t.Fatalf("err %v after %v; want the caller's deadline at 30 ms", err, time.Since(start))
	}
}
