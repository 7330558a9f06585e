package memstore

import (
	"time"

	"github.com/ringlimit/ringlimit"
)

// Leases: a key's holder hands another node a slice of the key's allowance,
// consumed here at once, and the other node decides that many hits from it
// in its own memory until it runs out or expires. Nothing a lease admits
// goes beyond what one limiter admits, given the same calls at the instants
// they came:
//
//   - a window (FixedWindow, SlidingWindow) leases a share of its current
//     window, counted in that window now; the lease expires with the window,
//     so its hits land in the window that counted them, and counting them
//     early only makes the window stricter meanwhile;
//   - a token bucket leases tokens, taken now. Taken early, a token lets the
//     bucket refill sooner than it would have: that matters only while the
//     bucket would be full, so a bucket leases only while it cannot fill up
//     within the lease's life with every token it leased given back
//     (available + outstanding + what refills over the lease ≤ capacity);
//   - a leaky bucket and a sliding log decline: the leaky bucket's Delay is
//     a schedule of departures that a lease would have to hand out in the
//     owner's order, and a log's decision depends on each hit's instant.
//
// Unused hits come back (Return) where the algorithm lets them: a bucket's
// tokens, a window's count while the window (or, for a sliding window, the
// next, where they count as the previous window's) lasts.

// Lease takes up to want hits of key under rule for a lease of at most ttl,
// at now, from a key with outstanding hits already leased (not returned or
// expired). It returns the hits taken, and how long the lease may be used
// (ttl, or less: a window's end); zero hits if the rule's algorithm does not
// lease or the key cannot lease now. It starts a key that holds no state,
// as a decision does: the caller checks that the key is this node's to
// start (node's ownership core).
func (l *Limiter) Lease(now time.Time, key string, rule ringlimit.Rule, want, outstanding int64, ttl time.Duration) (int64, time.Duration, error) {
	if err := ringlimit.ValidateCall(key, rule, 0); err != nil {
		return 0, 0, err
	}
	alg := rule.Algorithm
	if want <= 0 || ttl <= 0 || alg == ringlimit.LeakyBucket || alg == ringlimit.SlidingLog {
		return 0, 0, nil
	}
	s, frag := l.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rule != s.rule || s.p.window == 0 {
		s.rule, s.p = rule, paramsOf(rule)
	}
	p := &s.p
	t := now.UnixMilli()
	life := ttl.Milliseconds()
	i, ok := s.lookup(key, frag, 0)
	var peek ringlimit.Decision
	s.decideAt(&peek, key, frag, i, ok, 0, alg, p, t, 1, false)
	n := min(want, peek.Remaining)
	switch alg {
	case ringlimit.TokenBucket:
		// (Tokens refill limit per window: over the lease's life, at most
		// ⌈limit·life/window⌉ of them.)
		if peek.Remaining+outstanding+ceilDiv(p.limit*life, p.window) > p.burst {
			return 0, 0, nil
		}
	default: // the windows: the lease ends with the current window
		end := (floorDiv(t, p.window) + 1) * p.window
		life = min(life, end-t)
	}
	if n <= 0 || life <= 0 {
		return 0, 0, nil
	}
	var d ringlimit.Decision
	s.decideAt(&d, key, frag, i, ok, 0, alg, p, t, n, true)
	if !d.Allowed {
		return 0, 0, nil
	}
	return n, time.Duration(life) * time.Millisecond, nil
}

// Return gives back n hits of key under rule that a lease took at took and
// did not use, where the algorithm lets them come back: a token bucket's
// (never past its capacity), a window's while the window that counted them
// is current (a sliding window's, in the next one too, from its previous
// count). It gives nothing back for a key whose state left, or changed
// rule, since.
func (l *Limiter) Return(now time.Time, key string, rule ringlimit.Rule, n int64, took time.Time) {
	if n <= 0 || ringlimit.ValidateCall(key, rule, 0) != nil {
		return
	}
	s, frag := l.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rule != s.rule || s.p.window == 0 {
		s.rule, s.p = rule, paramsOf(rule)
	}
	p := &s.p
	n = min(n, p.burst)
	i, ok := s.lookup(key, frag, 0)
	if !ok {
		return
	}
	e := s.at(i)
	t := now.UnixMilli()
	if e.tag&^dirtyBit != tagOf(rule.Algorithm, 0, p) || e.until <= t {
		return
	}
	st := &e.st
	switch rule.Algorithm {
	case ringlimit.TokenBucket:
		at := max(t, st.b)
		st.a, st.b = max(0, drain(st.a, at-st.b, p.limit)-n*p.window), at
		s.holes.forget(key) // units off the top: the holes' places no longer hold
	case ringlimit.FixedWindow:
		if st.a != floorDiv(took.UnixMilli(), p.window) || st.a != floorDiv(t, p.window) {
			return
		}
		st.b = max(0, st.b-n)
	case ringlimit.SlidingWindow:
		w := floorDiv(took.UnixMilli(), p.window)
		switch floorDiv(t, p.window) {
		case w:
			if st.a == w {
				st.b = max(0, st.b-n)
			}
		case w + 1:
			if st.a == w+1 {
				st.c = max(0, st.c-n) // they count as the previous window's now
			} else if st.a == w {
				st.b = max(0, st.b-n) // (not rolled yet: they are still its current count)
			}
		}
	default:
		return
	}
	*s.denyAt(i) = 0
	if s.track && e.tag&dirtyBit == 0 {
		e.tag |= dirtyBit
		s.dirty = append(s.dirty, i)
	}
}
