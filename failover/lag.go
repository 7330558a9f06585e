package failover

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Lag defaults.
const (
	// DefaultLagInterval is how often Lag.Run's timer fires.
	DefaultLagInterval = 10 * time.Millisecond
	// lagWindow is how far back Recent looks.
	lagWindow = 5 * time.Second
	// lagNoise is the lateness below which a tick is on time: timers under
	// a millisecond are not honoured on these machines, and on a loaded
	// host every wake-up waits a few ms for a CPU.
	lagNoise = 5 * time.Millisecond
	// MaxStallCredit bounds the extra wait Extend grants one call for the
	// time this process spent descheduled during it: the call's timeout,
	// or minStallCredit if more, and never more than this.
	MaxStallCredit = time.Second
	minStallCredit = 100 * time.Millisecond
	lagTicks       = 256
	// resumeGrace is the least extra wait after a stall: time for the
	// goroutine that reads an answer that came meanwhile to run.
	resumeGrace = 2 * time.Millisecond
)

type lateTick struct {
	at   time.Time     // when the late tick fired
	late time.Duration // how late it fired
}

// Lag measures how long this process spends descheduled (a CPU quota that
// throttles it, a busy host, a stop-the-world pause), as the lateness of
// its own timers: Lifeguard's local health. A call to a peer or the store
// that ran while this process was not running does not count that time
// against the other side (Extend), and timeouts leave room for the lag
// measured lately (Recent).
//
// Run's timer feeds it; Tick takes one observation, so tests inject time.
// The zero Lag is ready to use; a nil *Lag measures nothing (Recent and
// StalledSince report 0). Lag is safe for simultaneous use by multiple
// goroutines.
type Lag struct {
	mu    sync.RWMutex
	ticks [lagTicks]lateTick // the late ticks, a ring in the order they fired; next is the oldest
	next  int
	// sum lets Recent and StalledSince answer without the lock or a walk
	// of the ticks: every forwarded call asks both (nil: no late tick yet).
	sum atomic.Pointer[lagSum]
}

// lagSum is what the late ticks come to: the newest tick's instant, and
// Recent's answer for every instant in [from, until) if valid.
type lagSum struct {
	newest      time.Time
	valid       bool
	from, until time.Time
	max         time.Duration
}

// Tick records that a timer due at due fired at now. Ticks come in the
// order they fire.
func (l *Lag) Tick(due, now time.Time) {
	late := now.Sub(due)
	if late < lagNoise {
		return
	}
	l.mu.Lock()
	l.ticks[l.next] = lateTick{at: now, late: late}
	l.next = (l.next + 1) % lagTicks
	l.sum.Store(&lagSum{newest: now})
	l.mu.Unlock()
}

// Recent is the largest lateness of a tick in the 5 s before now: how long
// this process may be descheduled at a stretch these days.
func (l *Lag) Recent(now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	s := l.sum.Load()
	if s == nil {
		return 0
	}
	if s.valid && !now.Before(s.from) && now.Before(s.until) {
		return s.max
	}
	from := now.Add(-lagWindow)
	var m time.Duration
	oldest := time.Time{} // the oldest tick counted: the answer holds until it leaves the window
	l.mu.RLock()
	l.back(func(t lateTick) bool {
		if !t.at.After(from) {
			return false
		}
		if !t.at.After(now) {
			m = max(m, t.late)
		}
		oldest = t.at
		return true
	})
	l.mu.RUnlock()
	// The answer stands from now until the oldest tick counted leaves the
	// window (a tick outside it stays outside; a new tick replaces sum),
	// if every tick is counted (none after now).
	if !s.newest.After(now) {
		until := now.Add(100 * 365 * 24 * time.Hour) // none counted: 0 until the next tick
		if !oldest.IsZero() {
			until = oldest.Add(lagWindow)
		}
		l.sum.CompareAndSwap(s, &lagSum{newest: s.newest, valid: true, from: now, until: until, max: m})
	}
	return m
}

// back calls f on the late ticks, the newest first, until it returns false.
func (l *Lag) back(f func(lateTick) bool) {
	for i := range lagTicks {
		t := l.ticks[(l.next-1-i+lagTicks)%lagTicks]
		if t.at.IsZero() || !f(t) {
			return
		}
	}
}

// StalledSince is how long this process was descheduled between since and
// now, as its late ticks in that span show (each counted from since at the
// earliest).
func (l *Lag) StalledSince(since, now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	if sum := l.sum.Load(); sum == nil || !sum.newest.After(since) {
		return 0 // no late tick since since
	}
	var s time.Duration
	l.mu.RLock()
	l.back(func(t lateTick) bool {
		if !t.at.After(since) {
			return false
		}
		if !t.at.After(now) {
			s += min(t.late, t.at.Sub(since))
		}
		return true
	})
	l.mu.RUnlock()
	return s
}

// Extend is asked when the timer of a call started at start, with the
// given timeout, due at due, fires at now. It returns how much longer the
// call may wait (0: it timed out): the time the call has waited for the
// other side is the time elapsed less the time this process spent
// descheduled meanwhile (the larger of StalledSince and the lateness of
// this very timer), and the call times out once that reaches timeout.
// A call that saw a stall waits at least 2 ms more, so that an answer that
// came while this process was descheduled is read before the call gives up.
// The credit for descheduled time is at most StallCredit(timeout).
func (l *Lag) Extend(start, due, now time.Time, timeout time.Duration) time.Duration {
	elapsed := now.Sub(start)
	credit := StallCredit(timeout)
	if elapsed >= timeout+credit {
		return 0
	}
	stalled := min(max(l.StalledSince(start, now), now.Sub(due)), credit)
	rest := timeout - (elapsed - stalled)
	if stalled >= lagNoise {
		// The answer may have come while this process was not running:
		// let the goroutine that reads it run first.
		rest = max(rest, resumeGrace)
	}
	if rest <= 0 {
		return 0
	}
	return max(rest, time.Millisecond)
}

// StallCredit is the most a call with the given timeout waits beyond it for
// the time this process spent descheduled: the timeout, or 100 ms if more,
// at most MaxStallCredit. A peer or store that hangs is still given up on
// within twice its timeout (100 ms more at least) on a host too busy to run
// this process.
func StallCredit(timeout time.Duration) time.Duration {
	return min(max(timeout, minStallCredit), MaxStallCredit)
}

// Run ticks every interval (DefaultLagInterval if zero or negative) and
// records each tick's lateness, until ctx is done.
func (l *Lag) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultLagInterval
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	due := time.Now().Add(interval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := time.Now()
			l.Tick(due, now)
			due = now.Add(interval)
			t.Reset(interval)
		}
	}
}
