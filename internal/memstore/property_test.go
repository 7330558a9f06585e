package memstore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ringlimit/ringlimit"
)

// Properties of the pure decision functions over random sequences of calls.
// Each check compares against what the algorithm promises, computed
// independently from the record of admitted hits.

// clone copies a state deeply, so a what-if decision on it leaves s alone.
func clone(s state) state {
	if s.log != nil {
		l := *s.log
		l.buf = append([]uint64(nil), s.log.buf...)
		s.log = &l
	}
	return s
}

// logStamps lists the log's stamps (one per hit) oldest first.
func logStamps(s state) []int64 {
	var out []int64
	if s.log == nil {
		return out
	}
	for i := 0; i < s.log.n; i++ {
		v := s.log.slot(i)
		for range v & maxSlotCount {
			out = append(out, s.log.stamp(v))
		}
	}
	return out
}

func sameState(a, b state) bool {
	if a.a != b.a || a.b != b.b || a.c != b.c {
		return false
	}
	return fmt.Sprint(logStamps(a)) == fmt.Sprint(logStamps(b))
}

// sameAnswer compares what a caller sees, ignoring ResetAfter.
func sameAnswer(a, b ringlimit.Decision) bool {
	a.ResetAfter, b.ResetAfter = 0, 0
	return a == b
}

type admitted struct{ t, n, slot int64 }

func randomRule(r *rand.Rand, alg ringlimit.Algorithm) ringlimit.Rule {
	windows := []int64{1, 7, 10, 100, 1000, 60000}
	rule := ringlimit.Rule{
		Algorithm: alg,
		Limit:     1 + r.Int64N(12),
		Window:    ms(windows[r.IntN(len(windows))]),
	}
	if alg == ringlimit.TokenBucket || alg == ringlimit.LeakyBucket {
		rule.Burst = r.Int64N(15)
	}
	return rule
}

func TestProperties(t *testing.T) {
	for alg := range ringlimit.Algorithm(5) {
		t.Run(alg.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(alg), 42))
			for seq := range 400 {
				checkSequence(t, r, randomRule(r, alg), seq)
				if t.Failed() {
					return
				}
			}
		})
	}
}

func checkSequence(t *testing.T, r *rand.Rand, rule ringlimit.Rule, seq int) {
	p := paramsOf(rule)
	alg := rule.Algorithm
	var s state
	var got []admitted
	now := int64(1_700_000_000_000) + r.Int64N(p.window)
	last := int64(-1) // effective time of the latest admitted call
	for step := range 200 {
		where := func() string {
			return fmt.Sprintf("seq %d step %d, rule %+v, now %d", seq, step, rule, now)
		}
		// Mostly forward in small steps, sometimes a long gap, sometimes back.
		switch x := r.IntN(20); {
		case x < 12:
			now += r.Int64N(p.window/4 + 2)
		case x < 18:
			now += r.Int64N(2 * p.window)
		case x < 19:
			now += p.window * (1 + r.Int64N(3))
		default:
			now -= r.Int64N(2 * p.window)
		}
		n := r.Int64N(p.burst + 1)
		if r.IntN(4) == 0 {
			n = 1
		}

		// The instant the algorithm decides at: the clock, clamped so it
		// never runs behind the latest admitted call.
		eff := now
		switch alg {
		case ringlimit.FixedWindow, ringlimit.SlidingWindow:
			if last >= 0 && floorDiv(now, p.window) < floorDiv(last, p.window) {
				eff = floorDiv(last, p.window) * p.window
			}
		default:
			eff = max(now, last)
		}
		monotone := now >= last

		// Peek changes nothing.
		before := clone(s)
		peek, peekUntil := decideV(&s, alg, &p, now, 1, false)
		if !sameState(before, s) {
			t.Fatalf("%s: peek changed the state", where())
		}

		d, until := decideV(&s, alg, &p, now, max(n, 1), n > 0)
		if n == 0 {
			d, until = peek, peekUntil
		}
		// Field sanity.
		if d.Limit != rule.Limit || d.Remaining < 0 || d.Remaining > p.burst ||
			(d.Allowed && d.RetryAfter != 0) || (!d.Allowed && d.RetryAfter <= 0) ||
			(alg != ringlimit.LeakyBucket && d.Delay != 0) || d.Delay < 0 || d.ResetAfter < 0 {
			t.Fatalf("%s n=%d: bad decision %+v", where(), n, d)
		}
		if until != eff+int64(d.ResetAfter/ms(1)) {
			t.Fatalf("%s: until %d, want eff %d + ResetAfter %s", where(), until, eff, d.ResetAfter)
		}
		if !d.Allowed && n > 0 && !sameState(before, s) {
			t.Fatalf("%s: a denied call changed the state", where())
		}
		if d.Allowed && n > 0 {
			got = append(got, admitted{t: eff, n: n, slot: eff + int64(d.Delay/ms(1))})
			last = eff
		}

		if monotone {
			checkExact(t, where, alg, p, before, s, now, n, d, peek)
		}
	}
	checkBounds(t, rule, p, got)
}

// checkExact checks that RetryAfter, Remaining and ResetAfter are exact, by
// asking what-if questions of copies of the state.
func checkExact(t *testing.T, where func() string, alg ringlimit.Algorithm, p params, before, after state, now, n int64, d, peek ringlimit.Decision) {
	t.Helper()
	ask := func(st state, at, k int64) ringlimit.Decision {
		c := clone(st)
		d, _ := decideV(&c, alg, &p, at, k, false)
		return d
	}
	if n > 0 && !d.Allowed {
		r := int64(d.RetryAfter / ms(1))
		if !ask(before, now+r, n).Allowed {
			t.Fatalf("%s: %d hits still denied after RetryAfter %s", where(), n, d.RetryAfter)
		}
		if r > 1 && ask(before, now+r-1, n).Allowed {
			t.Fatalf("%s: %d hits allowed 1ms before RetryAfter %s", where(), n, d.RetryAfter)
		}
	}
	// Remaining: that many hits pass now, one more does not.
	st := after
	if rem := d.Remaining; rem > 0 && !ask(st, now, rem).Allowed {
		t.Fatalf("%s: Remaining %d, but %d hits are denied", where(), rem, rem)
	}
	if rem := d.Remaining; rem < p.burst && ask(st, now, rem+1).Allowed {
		t.Fatalf("%s: Remaining %d, but %d hits pass", where(), rem, rem+1)
	}
	// ResetAfter: from then on the key answers as an empty one; a
	// millisecond earlier it does not.
	r := int64(d.ResetAfter / ms(1))
	var empty state
	for _, k := range []int64{1, p.burst} {
		if got, want := ask(st, now+r, k), ask(empty, now+r, k); !sameAnswer(got, want) {
			t.Fatalf("%s: at ResetAfter %s, %d hits get %+v, an empty key %+v", where(), d.ResetAfter, k, got, want)
		}
	}
	if r > 0 && sameAnswer(ask(st, now+r-1, 1), ask(empty, now+r-1, 1)) {
		t.Fatalf("%s: 1ms before ResetAfter %s the key already answers as an empty one", where(), d.ResetAfter)
	}
	_ = peek
}

// checkBounds checks what was admitted against what the algorithm promises.
func checkBounds(t *testing.T, rule ringlimit.Rule, p params, got []admitted) {
	t.Helper()
	for i := 1; i < len(got); i++ {
		a, b := got[i-1].t, got[i].t
		if rule.Algorithm == ringlimit.FixedWindow || rule.Algorithm == ringlimit.SlidingWindow {
			// Time may go back inside a window (that only makes the
			// sliding counter stricter), never to an earlier window.
			a, b = floorDiv(a, p.window), floorDiv(b, p.window)
		}
		if b < a {
			t.Fatalf("rule %+v: decision time went back: %d after %d", rule, got[i].t, got[i-1].t)
		}
	}
	switch rule.Algorithm {
	case ringlimit.FixedWindow, ringlimit.SlidingWindow:
		per := map[int64]int64{}
		for _, a := range got {
			idx := floorDiv(a.t, p.window)
			if per[idx] += a.n; per[idx] > p.limit {
				t.Fatalf("rule %+v: %d admitted in window %d", rule, per[idx], idx)
			}
		}
	case ringlimit.SlidingLog:
		for i, a := range got {
			sum := int64(0)
			for _, b := range got[:i+1] {
				if b.t > a.t-p.window {
					sum += b.n
				}
			}
			if sum > p.limit {
				t.Fatalf("rule %+v: %d admitted in (%d, %d]", rule, sum, a.t-p.window, a.t)
			}
		}
	case ringlimit.TokenBucket:
		// In any span, burst + limit per window.
		for i := range got {
			sum := int64(0)
			for j := i; j < len(got); j++ {
				sum += got[j].n
				if sum*p.window > p.burst*p.window+p.limit*(got[j].t-got[i].t) {
					t.Fatalf("rule %+v: %d admitted in %d ms", rule, sum, got[j].t-got[i].t)
				}
			}
		}
	case ringlimit.LeakyBucket:
		// Steady outflow: each call's first hit departs (at t+Delay, Delay
		// rounded up to the ms) no sooner than the previous call's hits,
		// T = window/limit apart, have gone; and never before it arrived.
		for i := 1; i < len(got); i++ {
			a, b := got[i-1], got[i]
			if (b.slot-a.slot+1)*p.limit <= a.n*p.window {
				t.Fatalf("rule %+v: departures at %d (%d hits) then %d: closer than T", rule, a.slot, a.n, b.slot)
			}
		}
		for i := range got {
			sum := int64(0)
			for j := i; j < len(got); j++ {
				sum += got[j].n
				if sum > p.burst+ceilDiv(p.limit*(got[j].t-got[i].t), p.window) {
					t.Fatalf("rule %+v: %d admitted in %d ms", rule, sum, got[j].t-got[i].t)
				}
			}
		}
	}
}

// decideV is decide returning its Decision.
func decideV(s *state, alg ringlimit.Algorithm, p *params, now, n int64, consume bool) (ringlimit.Decision, int64) {
	var d ringlimit.Decision
	until := decide(&d, s, alg, p, now, n, consume)
	return d, until
}
