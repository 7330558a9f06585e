package memstore

import (
	"math/bits"
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
//   - a token bucket leases tokens, taken now, whether or not it is near
//     its limit: while they are out, the holder's own bucket holds that
//     many fewer (the floor, floor.go), so that it cannot refill into room
//     the borrowers may still spend (before, a bucket leased only while it
//     could not fill up within the lease's life, so a hot key far under its
//     limit, the usual case, never leased);
//   - a leaky bucket and a sliding log decline: the leaky bucket's Delay is
//     a schedule of departures that a lease would have to hand out in the
//     owner's order, and a log's decision depends on each hit's instant
//     (docs/bucket-leases.md has designs for both).
//
// Unused hits come back (Return) where the algorithm lets them: a bucket's
// tokens while the floor its lease raised stands, a window's count while
// the window (or, for a sliding window, the next, where they count as the
// previous window's) lasts.

// Grant is what Lease took: N hits at At, to be used for Life at most.
// Floor names the floor a token bucket's lease raised (floor.go), 0 for a
// window's: Return counts in that floor only.
type Grant struct {
	N     int64
	Life  time.Duration
	At    time.Time
	Floor uint64
}

// floorMargin is how far past a lease's life its floor stands, as a
// fraction of the life (node's ledger keeps a grant a fifth longer than
// its lease: the borrower counts the life from before it asked).
const floorMargin = 5

// Lease takes up to want hits of key under rule for a lease of at most
// ttl, at now. It returns what it took (the hits, and how long the lease
// may be used: ttl, or less: a window's end), zero hits if the rule's
// algorithm does not lease or the key cannot lease now. It starts a key
// that holds no state, as a decision does: the caller checks that the key
// is this node's to start (node's ownership core).
func (l *Limiter) Lease(now time.Time, key string, rule ringlimit.Rule, want int64, ttl time.Duration) (Grant, error) {
	if err := ringlimit.ValidateCall(key, rule, 0); err != nil {
		return Grant{}, err
	}
	alg := rule.Algorithm
	if want <= 0 || ttl <= 0 || alg == ringlimit.LeakyBucket || alg == ringlimit.SlidingLog {
		return Grant{}, nil
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
	end := int64(0)
	switch alg {
	case ringlimit.TokenBucket:
		end = t + life + life/floorMargin
		// A state that leaves carries the floor folded into its level
		// (floor.go), which must stay in the buckets' domain (maxQueue).
		if hi, lo := bits.Mul64(uint64(end-t), uint64(p.limit)); hi != 0 || lo > maxQueue {
			return Grant{}, nil
		}
		if len(s.floors.m) >= maxFloors {
			s.sweepFloors(t)
			if _, had := s.floors.m[key]; !had && len(s.floors.m) >= maxFloors {
				return Grant{}, nil
			}
		}
	default: // the windows: the lease ends with the current window
		w := (floorDiv(t, p.window) + 1) * p.window
		life = min(life, w-t)
	}
	if n <= 0 || life <= 0 {
		return Grant{}, nil
	}
	var d ringlimit.Decision
	s.decideAt(&d, key, frag, i, ok, 0, alg, p, t, n, true)
	if !d.Allowed {
		return Grant{}, nil
	}
	g := Grant{N: n, Life: time.Duration(life) * time.Millisecond, At: now}
	if alg == ringlimit.TokenBucket {
		tag := tagOf(alg, 0, p)
		f, had := s.floors.m[key]
		if !had || f.tag != tag {
			f = floorRec{tag: tag, id: uint64(l.newEpoch()), lo: p.limit, hi: p.limit}
		}
		f.units += n * p.window // (the level rose by as much: it is at the floor or above)
		f.end = max(f.end, end)
		f.lo, f.hi = min(f.lo, p.limit), max(f.hi, p.limit)
		if s.floors.m == nil {
			s.floors.m = map[string]floorRec{}
		}
		s.floors.m[key] = f
		g.Floor = f.id
		if i, ok := s.lookup(key, frag, 0); ok { // (the decision may have inserted it)
			e := s.at(i)
			e.until = max(e.until, f.keeps(p.limit))
		}
	}
	return g, nil
}

// Return gives back left hits (at most g.N) of key under rule that the
// lease g did not use, where the algorithm lets them come back: a token
// bucket's while the floor g raised stands (and that floor falls by g.N,
// left or not: Return with left 0 is how a holder releases a lease that
// ended unused or spent), a window's while the window that counted them is
// current (a sliding window's, in the next one too, from its previous
// count). It gives nothing back for a key whose state left, or changed
// rule, since, nor for a token bucket whose floor ended or started again
// since g (its tokens came back as the bucket refilled into the room the
// floor kept).
func (l *Limiter) Return(now time.Time, key string, rule ringlimit.Rule, g Grant, left int64) {
	if ringlimit.ValidateCall(key, rule, 0) != nil || g.N <= 0 {
		return
	}
	if rule.Algorithm == ringlimit.TokenBucket {
		l.returnTokens(now.UnixMilli(), key, rule, g, left)
		return
	}
	n := min(left, g.N)
	if n <= 0 {
		return
	}
	took := g.At
	s, frag := l.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rule != s.rule || s.p.window == 0 {
		s.rule, s.p = rule, paramsOf(rule)
	}
	p := &s.p
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

// returnTokens is Return for a token bucket, at t (ms).
func (l *Limiter) returnTokens(t int64, key string, rule ringlimit.Rule, g Grant, left int64) {
	s, frag := l.locate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if rule != s.rule || s.p.window == 0 {
		s.rule, s.p = rule, paramsOf(rule)
	}
	p := &s.p
	tag := tagOf(rule.Algorithm, 0, p)
	f, ok := s.floors.m[key]
	if !ok || g.Floor == 0 || f.id != g.Floor || f.tag != tag {
		return // its floor ended, or started again, since: nothing comes back
	}
	// The state as it stands, at the floor or above (a state that left
	// took the floor with it: one that still matters here is the floor's).
	var st state
	i, ok := s.lookup(key, frag, 0)
	if ok {
		switch e := s.at(i); {
		case e.until <= t: // (gone: the floor holds it)
		case e.tag&^dirtyBit != tag:
			return // a state under another rule: not the one the lease came from
		default:
			st = e.st
		}
	} else {
		i = none
	}
	if f.settle(&st, t, p.limit) {
		delete(s.floors.m, key)
		return // ended: nothing comes back
	}
	// The level is at the floor or above, and the floor holds g's N: the
	// level less what g did not use is at the floor it falls to or above.
	st.a -= min(left, g.N) * p.window
	f.units = max(0, f.units-g.N*p.window)
	until := st.b + p.perLimit.ceil(max(0, st.a))
	if f.units == 0 {
		delete(s.floors.m, key)
	} else {
		s.floors.m[key] = f
		until = max(until, f.keeps(p.limit))
	}
	st.a = max(0, st.a)
	s.record(key, frag, i, 0, tag, &st, until, t)
	if i, ok := s.lookup(key, frag, 0); ok {
		*s.denyAt(i) = 0
	}
	s.holes.forget(key) // units off the top: the holes' places no longer hold
}
