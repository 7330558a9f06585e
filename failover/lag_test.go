package failover_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringlimit/ringlimit/failover"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// TestLag feeds ticks at explicit instants and reads what the node would
// make of them.
func TestLag(t *testing.T) {
	var l failover.Lag
	// Ticks every 10 ms; the one due at 100 ms fires at 175 ms (descheduled
	// for 75 ms), the one due at 185 ms at 185.5 ms and the one due at 10 ms
	// on time (under the 5 ms of noise), the one due at 195 ms at 203 ms.
	l.Tick(at(10*ms), at(10*ms))
	l.Tick(at(100*ms), at(175*ms))
	l.Tick(at(185*ms), at(185*ms+ms/2))
	l.Tick(at(195*ms), at(203*ms))
	for _, c := range []struct {
		name       string
		since, now time.Duration
		want       time.Duration
		fn         func(since, now time.Time) time.Duration
	}{
		{"recent: the worst lateness", 0, 210 * ms, 75 * ms, func(_, now time.Time) time.Duration { return l.Recent(now) }},
		{"recent: forgotten after 5 s", 0, 5*time.Second + 176*ms, 8 * ms, func(_, now time.Time) time.Duration { return l.Recent(now) }},
		{"recent: nothing yet at 150 ms", 0, 150 * ms, 0, func(_, now time.Time) time.Duration { return l.Recent(now) }},
		{"stalled over the whole stall", 90 * ms, 210 * ms, 83 * ms, l.StalledSince},
		{"stalled from within the stall", 150 * ms, 210 * ms, 25*ms + 8*ms, l.StalledSince},
		{"stalled after it: on time", 176 * ms, 190 * ms, 0, l.StalledSince},
	} {
		if got := c.fn(at(c.since), at(c.now)); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	var nilLag *failover.Lag
	if nilLag.Recent(at(0)) != 0 || nilLag.StalledSince(at(0), at(time.Second)) != 0 {
		t.Error("a nil Lag measures something")
	}
}

// TestLagExtend: a call whose timer fires while (or after) this process
// was descheduled gets the descheduled time back; a call whose peer had its
// whole timeout does not.
func TestLagExtend(t *testing.T) {
	var stalled failover.Lag
	stalled.Tick(at(15*ms), at(85*ms)) // descheduled from about 15 to 85 ms
	for _, c := range []struct {
		name            string
		l               *failover.Lag
		start, due, now time.Duration
		timeout, want   time.Duration
	}{
		{"on time, no stall: timed out", nil, 0, 20 * ms, 20 * ms, 20 * ms, 0},
		{"on time, no stall, a timer late by less than the noise: timed out", nil, 0, 20 * ms, 24 * ms, 20 * ms, 0},
		{"this timer fired 60 ms late: the peer had its 20 ms, but 2 ms to read an answer that came meanwhile", nil, 0, 20 * ms, 80 * ms, 20 * ms, 2 * ms},
		{"the ticker saw the stall, the timer fired on time", &stalled, 10 * ms, 90 * ms, 90 * ms, 80 * ms, 70 * ms},
		{"a stall before the call counts nothing", &stalled, 100 * ms, 120 * ms, 120 * ms, 20 * ms, 0},
		{"a stall that ate part of the wait: the rest", &stalled, 10 * ms, 80 * ms, 85 * ms, 15 * ms, 10 * ms},
		{"credit is bounded: 100 ms for a short timeout", nil, 0, 20 * ms, 121 * ms, 20 * ms, 0},
		{"credit is bounded: the timeout for a long one", nil, 0, 300 * ms, 601 * ms, 300 * ms, 0},
		{"a long stall within the credit: 2 ms to read the answer", nil, 0, 300 * ms, 590 * ms, 300 * ms, 2 * ms},
	} {
		if got := c.l.Extend(at(c.start), at(c.due), at(c.now), c.timeout); got != c.want {
			t.Errorf("%s: Extend = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLagRun: Run's timer records a stall of the process (here, of the
// bubble's clock jumping past a due tick is impossible, so a tick is
// recorded late only if Run's goroutine is late) and stops with its
// context.
func TestLagRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l failover.Lag
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { l.Run(ctx, 10*ms); close(done) }()
		time.Sleep(time.Second) // the bubble's fake clock: 100 ticks, every one on time
		if r := l.Recent(time.Now()); r != 0 {
			t.Errorf("on-time ticks recorded a lag of %v", r)
		}
		cancel()
		<-done
	})
}

// TestLagAgainstAWalk: Recent and StalledSince (which answer from a summary
// when they can) agree with a plain walk of every late tick, over random
// ticks and questions about instants before, at and after the newest tick.
func TestLagAgainstAWalk(t *testing.T) {
	type tick struct {
		at   time.Time
		late time.Duration
	}
	for seed := range int64(50) {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		var l failover.Lag
		var ticks []tick
		now := t0
		recent := func(q time.Time) (m time.Duration) {
			for _, k := range ticks[max(0, len(ticks)-256):] {
				if k.at.After(q.Add(-5*time.Second)) && !k.at.After(q) {
					m = max(m, k.late)
				}
			}
			return m
		}
		stalled := func(since, q time.Time) (s time.Duration) {
			for _, k := range ticks[max(0, len(ticks)-256):] {
				if k.at.After(since) && !k.at.After(q) {
					s += min(k.late, k.at.Sub(since))
				}
			}
			return s
		}
		for step := range 400 {
			now = now.Add(time.Duration(rng.IntN(800)) * ms)
			if rng.IntN(3) == 0 {
				late := time.Duration(rng.IntN(40)) * ms
				l.Tick(now.Add(-late), now)
				if late >= 5*ms {
					ticks = append(ticks, tick{now, late})
				}
			}
			q := now.Add(time.Duration(rng.IntN(12000)-6000) * ms)
			if got, want := l.Recent(q), recent(q); got != want {
				t.Fatalf("seed %d step %d: Recent(%v) = %v, a walk says %v", seed, step, q.Sub(t0), got, want)
			}
			since := q.Add(-time.Duration(rng.IntN(3000)) * ms)
			if got, want := l.StalledSince(since, q), stalled(since, q); got != want {
				t.Fatalf("seed %d step %d: StalledSince(%v, %v) = %v, a walk says %v", seed, step, since.Sub(t0), q.Sub(t0), got, want)
			}
		}
	}
}
