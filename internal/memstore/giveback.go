package memstore

import (
	"time"

	"github.com/ringlimit/ringlimit"
)

// Charge is what GiveBack knows of the charge it undoes: an admitted
// AllowN of N hits, decided no earlier than At (ms, on the clock of
// whoever decided it: the caller reads it just before the call) with the
// Decision's Remaining.
type Charge struct {
	N, At, Remaining int64
}

// GiveBack takes back from key's state under rule, at now, the hits of
// ch, for a caller that was charged them and did not use them (a request
// refused by another of its limits), and reports whether it gave anything.
//
// It never gives more than the charge still weighs on the state, so a
// given-back key admits no more than if the charge had not been made; it
// gives less where it cannot tell that weight:
//
//   - a fixed window gives the hits back to the window of At while it is
//     the current one (a window that has turned no longer counts them);
//   - a sliding window counter takes them from the count of the window of
//     At, as the current window's or, once it has turned, the previous
//     one's; its weight is gone a window later;
//   - a token bucket's level falls by the hits less what the bucket has
//     drained since At (it may have drained the charge away), never below
//     empty;
//   - a leaky bucket takes the hits out of its queue only if they are its
//     last (no hit was admitted after them: the state was last written at
//     At, with the level the charge's Remaining tells), because a later
//     hit's departure slot was given already and cannot move up;
//   - a sliding log takes them off its newest stamp, if that stamp is At
//     (hits at one instant are alike); a later stamp is another call's.
//
// At must not be after the charge's instant on this Limiter's clock: an
// At later than that could take another call's hits (a later stamp or
// slot). An At after now, which only a caller whose clock runs ahead can
// send, gives nothing. It does nothing for a key whose state is not here
// or was recorded under another rule.
func (l *Limiter) GiveBack(now time.Time, key string, rule ringlimit.Rule, ch Charge) bool {
	if ch.N <= 0 || ringlimit.ValidateCall(key, rule, ch.N) != nil {
		return false
	}
	s, frag := l.locate(key)
	return s.giveBack(key, frag, rule, ch, now.UnixMilli())
}

func (s *shard) giveBack(key string, frag uint32, rule ringlimit.Rule, ch Charge, now int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rule != s.rule || s.p.window == 0 {
		s.rule, s.p = rule, paramsOf(rule)
	}
	p := &s.p
	i, ok := s.lookup(key, frag, 0)
	if !ok {
		return false
	}
	e := s.at(i)
	if e.tag&^dirtyBit != tagOf(rule.Algorithm, 0, p) || e.until <= now {
		return false
	}
	var keep int64
	if rule.Algorithm == ringlimit.TokenBucket && s.hasFloors() {
		keep = s.floorAt(key, e.tag&^dirtyBit, &e.st, p, now) // the level as it stands: at the floor or above
	}
	if !give(&e.st, &e.until, rule.Algorithm, p, ch, now) {
		return false
	}
	e.until = max(e.until, keep)
	s.holes.forget(key) // a bucket's units off the top: the holes' places no longer hold
	*s.denyAt(i) = 0
	if s.track && e.tag&dirtyBit == 0 {
		e.tag |= dirtyBit
		s.dirty = append(s.dirty, i)
	}
	return true
}

// give is GiveBack on one state, at now (ms); until is the state's.
func give(st *state, until *int64, alg ringlimit.Algorithm, p *params, ch Charge, now int64) bool {
	n, w := ch.N, p.window
	if ch.At > now {
		return false // a caller's clock ahead of this one: At may be after the charge
	}
	at := floorDiv(ch.At, w) // the window of At
	switch alg {
	case ringlimit.FixedWindow:
		if st.a != at || floorDiv(now, w) != at || st.b <= 0 {
			return false
		}
		st.b -= min(n, st.b)
	case ringlimit.SlidingWindow:
		// The state's window is the current one or the one before (its
		// count then weighs as the previous window's).
		idx := max(floorDiv(now, w), st.a)
		switch {
		case st.a == at && idx <= at+1 && st.b > 0:
			st.b -= min(n, st.b)
		case st.a == at+1 && idx == at+1 && st.c > 0:
			st.c -= min(n, st.c)
		default:
			return false
		}
	case ringlimit.TokenBucket:
		t := max(now, st.b)
		level := drain(st.a, t-st.b, p.limit)
		// What the charge still weighs: its units less the most the bucket
		// drained of them since (the level drains limit units a ms at
		// most, and a charge drained away weighs nothing).
		d := t - min(t, ch.At)
		if d >= ceilDiv(n*w, p.limit) {
			return false
		}
		g := min(level, n*w-d*p.limit)
		if g <= 0 {
			return false
		}
		level -= g
		st.a, st.b = level, t
		*until = t + p.perLimit.ceil(level)
	case ringlimit.LeakyBucket:
		// The charge's hits are the queue's last only if the state was
		// last written at At with the level the charge left: a later hit
		// adds a whole hit's units (another Remaining) or writes later.
		if st.b != ch.At || p.burst-p.perWindow.div(st.a) != ch.Remaining || st.a < n*w {
			return false
		}
		t := max(now, st.b)
		level := drain(st.a, t-st.b, p.limit)
		g := min(level, n*w) // the part of the hits not departed yet
		if g <= 0 {
			return false
		}
		level -= g
		st.a, st.b = level, t
		*until = t + p.perLimit.ceil(level)
	case ringlimit.SlidingLog:
		lg := st.log
		if lg == nil || lg.n == 0 {
			return false
		}
		last := (lg.head + lg.n - 1) % len(lg.buf)
		v := lg.buf[last]
		if lg.stamp(v) != ch.At || ch.At <= max(now, ch.At)-w {
			return false
		}
		k := min(n, int64(v&maxSlotCount))
		lg.total -= k
		if k == int64(v&maxSlotCount) {
			lg.n--
		} else {
			lg.buf[last] = v - uint64(k)
		}
		if lg.n == 0 {
			*until = now
		} else {
			*until = lg.newest() + w
		}
	default:
		return false
	}
	return true
}
