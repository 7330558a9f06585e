package memstore

import (
	"math/bits"
	"time"

	"github.com/ringlimit/ringlimit"
)

// The decision functions. Each is pure: it reads the key's state and the time
// (integer milliseconds since the Unix epoch), and, only when consume is set
// and the hits are admitted, writes the new state. A denied call or a peek
// leaves the state as it was. Every value stays below 2^51 for rules that
// ringlimit.Rule.Validate accepts, so the Valkey scripts in remote/ compute
// the same integers with Lua doubles.
//
// A clock that went backwards is clamped to the latest instant the state has
// seen, so it never refills a bucket or reopens a window.

// params is a validated rule in the units the algorithms use.
type params struct {
	limit  int64 // Rule.Limit
	burst  int64 // Rule.Capacity(): Burst, or Limit when Burst is zero
	window int64 // Rule.Window in ms

	// Reciprocals of limit and window, for the buckets' divisions (see
	// divider): a shard keeps a rule's params, so they are made once.
	perLimit, perWindow divider
}

func paramsOf(r ringlimit.Rule) params {
	p := params{limit: r.Limit, burst: r.Capacity(), window: r.WindowMillis()}
	p.perLimit, p.perWindow = newDivider(p.limit), newDivider(p.window)
	return p
}

// divider divides by a fixed d > 0 with a multiplication: a 64-bit IDIV
// takes 14–45 cycles and a bucket decision needs three, which measured as
// most of its arithmetic. m = ⌊(2^64−1)/d⌋ makes ⌊a·m/2^64⌋ equal ⌊a/d⌋ or
// one less for every a < 2^63, and one comparison corrects it.
type divider struct{ d, m uint64 }

func newDivider(d int64) divider { return divider{uint64(d), ^uint64(0) / uint64(d)} }

// div is ⌊a/d⌋ for 0 ≤ a < 2^63.
func (v divider) div(a int64) int64 {
	q, _ := bits.Mul64(uint64(a), v.m)
	if uint64(a)-q*v.d >= v.d {
		q++
	}
	return int64(q)
}

// ceil is ⌈a/d⌉ for 0 ≤ a < 2^62.
func (v divider) ceil(a int64) int64 { return v.div(a + int64(v.d) - 1) }

// state is one key's state. The meaning of a, b and c depends on the algorithm:
//
//	TokenBucket, LeakyBucket: a = level, b = last update (ms)
//	FixedWindow:              a = window index, b = count
//	SlidingWindow:            a = window index, b = current count, c = previous count
//	SlidingLog:               log (a, b, c unused)
//
// The zero state is a key with full capacity.
type state struct {
	a, b, c int64
	log     *stampLog
}

// ms is v milliseconds, saturated (ringlimit.Millis).
func ms(v int64) time.Duration { return ringlimit.Millis(v) }

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// floorDiv is ⌊a/b⌋ for b > 0 (Go's / truncates toward zero).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// drain empties a bucket level by rate units per ms over elapsed ms. (A
// 128-bit product, not a division: measured, the divisions are most of a
// decision's arithmetic.)
func drain(level, elapsed, rate int64) int64 {
	if elapsed <= 0 {
		return level
	}
	if hi, lo := bits.Mul64(uint64(elapsed), uint64(rate)); hi != 0 || lo >= uint64(level) {
		return 0
	}
	return level - elapsed*rate
}

// The buckets share one representation: a level in units of 1/window of a hit
// (a hit adds window units) that drains limit units per ms, which is exactly
// limit hits per window with no rounding. level is the bucket's fill: the
// token bucket holds burst·window − level tokens·window; the leaky bucket's
// level/limit ms is how long until its queue is empty.

// tokenBucket admits n hits iff level + n·window ≤ burst·window.
func tokenBucket(d *ringlimit.Decision, s *state, p *params, now, n int64, consume bool) int64 {
	t := max(now, s.b)
	level := drain(s.a, t-s.b, p.limit)
	full := p.burst * p.window
	*d = ringlimit.Decision{Limit: p.limit}
	if level+n*p.window <= full {
		d.Allowed = true
		if consume {
			level += n * p.window
			s.a, s.b = level, t
		}
	} else {
		d.RetryAfter = ms(ceilDiv(level+n*p.window-full, p.limit))
	}
	if level < full { // a reservation (WaitN) may take the level past full
		d.Remaining = p.perWindow.div(full - level)
	}
	r := p.perLimit.ceil(level)
	d.ResetAfter = ms(r)
	return t + r
}

// leakyBucket admits n hits iff the hits still waiting (⌊level/window⌋) plus n
// fit in burst. The first admitted hit departs when the queue ahead of it has
// drained: Delay = level/limit ms.
func leakyBucket(d *ringlimit.Decision, s *state, p *params, now, n int64, consume bool) int64 {
	t := max(now, s.b)
	level := drain(s.a, t-s.b, p.limit)
	*d = ringlimit.Decision{Limit: p.limit}
	if p.perWindow.div(level)+n <= p.burst {
		d.Allowed = true
		d.Delay = ms(p.perLimit.ceil(level))
		if consume {
			level += n * p.window
			s.a, s.b = level, t
		}
	} else {
		// Wait until ⌊level/window⌋ ≤ burst − n, i.e. level ≤ (burst−n+1)·window − 1.
		d.RetryAfter = ms(ceilDiv(level-(p.burst-n+1)*p.window+1, p.limit))
	}
	d.Remaining = max(0, p.burst-p.perWindow.div(level))
	r := p.perLimit.ceil(level)
	d.ResetAfter = ms(r)
	return t + r
}

// fixedWindow admits n hits iff count + n ≤ limit in the current window.
func fixedWindow(d *ringlimit.Decision, s *state, p *params, now, n int64, consume bool) int64 {
	idx, t := floorDiv(now, p.window), now
	if idx < s.a { // the clock went back: stay in the newest window seen
		idx, t = s.a, s.a*p.window
	}
	count := int64(0)
	if idx == s.a {
		count = s.b
	}
	end := (idx + 1) * p.window
	*d = ringlimit.Decision{Limit: p.limit}
	if count+n <= p.limit {
		d.Allowed = true
		if consume {
			count += n
			s.a, s.b = idx, count
		}
	} else {
		d.RetryAfter = ms(end - t)
	}
	d.Remaining = max(0, p.limit-count)
	if count == 0 {
		return t
	}
	d.ResetAfter = ms(end - t)
	return end
}

// slidingCounts is a sliding window counter's current window idx at now (a
// clock that went backwards is clamped to the state's window), the time e
// elapsed in it, and its current and previous counts.
func slidingCounts(s *state, w, now int64) (idx, e, cur, prev int64) {
	idx, t := floorDiv(now, w), now
	if idx < s.a {
		idx, t = s.a, s.a*w
	}
	switch idx - s.a {
	case 0:
		cur, prev = s.b, s.c
	case 1:
		prev = s.b
	}
	return idx, t - idx*w, cur, prev
}

// slidingWindow admits n hits iff ⌊prev·(window−e)/window⌋ + cur + n ≤ limit,
// where e is the time elapsed in the current window.
func slidingWindow(d *ringlimit.Decision, s *state, p *params, now, n int64, consume bool) int64 {
	w := p.window
	idx, e, cur, prev := slidingCounts(s, w, now)
	t := idx*w + e
	used := prev*(w-e)/w + cur
	*d = ringlimit.Decision{Limit: p.limit}
	if used+n <= p.limit {
		d.Allowed = true
		if consume {
			cur += n
			used += n
			s.a, s.b, s.c = idx, cur, prev
		}
	} else {
		d.RetryAfter = ms(slidingRetry(prev, cur, n, e, p.limit, w))
	}
	d.Remaining = max(0, p.limit-used)
	r := slidingReset(prev, cur, e, w)
	d.ResetAfter = ms(r)
	return t + r
}

// firstFit is the least x in [0, w) with ⌊p·(w−x)/w⌋ ≤ r (r ≥ 0), or w if
// there is none: p·(w−x) ≤ (r+1)·w − 1 ⇔ x ≥ ⌈(p·w − (r+1)·w + 1)/p⌉.
func firstFit(p, r, w int64) int64 {
	x := p*w - (r+1)*w + 1
	if x <= 0 {
		return 0
	}
	return min(ceilDiv(x, p), w)
}

// slidingRetry is how long after e (ms into the current window) n more hits
// fit: later in this window as prev's weight fades, else in the next window
// (where cur becomes prev), else at the start of the one after (where both
// are gone).
func slidingRetry(prev, cur, n, e, limit, w int64) int64 {
	if room := limit - cur - n; room >= 0 {
		if x := firstFit(prev, room, w); x < w {
			return x - e
		}
	}
	if x := firstFit(cur, limit-n, w); x < w {
		return w - e + x
	}
	return 2*w - e
}

// slidingReset is how long after e until the weighted count is zero again.
func slidingReset(prev, cur, e, w int64) int64 {
	if cur > 0 {
		return w - e + firstFit(cur, 0, w)
	}
	if prev == 0 {
		return 0
	}
	return max(0, firstFit(prev, 0, w)-e)
}

// slidingLog admits n hits iff the stamps in (t−window, t] plus n ≤ limit.
// Only an admitted call changes the log (it drops the stamps that have left
// the window and adds its own).
func slidingLog(d *ringlimit.Decision, s *state, p *params, now, n int64, consume bool) int64 {
	l := s.log
	t, gone, count := now, int64(0), int64(0)
	if l != nil {
		t = max(now, l.newest())
		gone = l.countUpTo(t - p.window)
		count = l.total - gone
	}
	*d = ringlimit.Decision{Limit: p.limit}
	if count+n <= p.limit {
		d.Allowed = true
		if consume && n > 0 {
			if l == nil {
				l = new(stampLog)
				s.log = l
			}
			l.prune(t - p.window)
			l.add(t, n, p.limit)
			count += n
		}
	} else {
		// The oldest count−(limit−n) stamps in the window must leave it first.
		d.RetryAfter = ms(l.nth(gone+count-(p.limit-n)) + p.window - t)
	}
	d.Remaining = max(0, p.limit-count)
	if count == 0 {
		return t
	}
	until := l.newest() + p.window
	d.ResetAfter = ms(until - t)
	return until
}

// decide runs the rule's algorithm on s for n hits at now (ms). consume is
// false for a peek. It also returns the instant (ms) from which the state no
// longer matters: from then on it decides exactly as an empty state would.
//
// It writes the Decision through d: returned by value, the 56-byte struct
// was copied once more at each level (measured: a third of a decision).
func decide(d *ringlimit.Decision, s *state, alg ringlimit.Algorithm, p *params, now, n int64, consume bool) int64 {
	switch alg {
	case ringlimit.TokenBucket:
		return tokenBucket(d, s, p, now, n, consume)
	case ringlimit.LeakyBucket:
		return leakyBucket(d, s, p, now, n, consume)
	case ringlimit.FixedWindow:
		return fixedWindow(d, s, p, now, n, consume)
	case ringlimit.SlidingLog:
		return slidingLog(d, s, p, now, n, consume)
	default:
		return slidingWindow(d, s, p, now, n, consume)
	}
}

// admitsOneAt is the instant (ms) from which s, under the rule of alg and
// p, admits one hit again, for a state that has nothing remaining at now
// (the one-hit RetryAfter of a peek, from now); now itself if it admits one
// already. Eviction keeps it, to tell a state that denies. It is the
// peek's arithmetic without the rest of a Decision; a fixed window or a
// log just written costs nothing, and only a log that holds stamps out of
// its window (or more than Limit) takes the peek.
func admitsOneAt(s *state, alg ringlimit.Algorithm, p *params, now int64) int64 {
	switch alg {
	case ringlimit.TokenBucket, ringlimit.LeakyBucket:
		t := max(now, s.b)
		level := drain(s.a, t-s.b, p.limit)
		over := level + p.window - p.burst*p.window // a token bucket: one hit's units over capacity
		if alg == ringlimit.LeakyBucket {
			over = level - p.burst*p.window + 1 // ⌊level/window⌋ + 1 ≤ burst once level ≤ burst·window − 1
		}
		if over <= 0 {
			return now
		}
		return t + ceilDiv(over, p.limit)
	case ringlimit.FixedWindow:
		if idx := max(floorDiv(now, p.window), s.a); idx == s.a && s.b >= p.limit {
			return (idx + 1) * p.window
		}
		return now
	case ringlimit.SlidingWindow:
		w := p.window
		idx, e, cur, prev := slidingCounts(s, w, now)
		t := idx*w + e
		if prev*(w-e)/w+cur+1 <= p.limit {
			return now
		}
		return t + slidingRetry(prev, cur, 1, e, p.limit, w)
	case ringlimit.SlidingLog:
		// A log just written holds only stamps in its window: with Limit
		// of them, the oldest slot's leaving admits one.
		if l := s.log; l != nil && l.n > 0 && l.total == p.limit {
			last := l.head + l.n - 1 // the newest slot, without newest's division
			if last >= len(l.buf) {
				last -= len(l.buf)
			}
			if first := l.stamp(l.buf[l.head]); first > max(now, l.stamp(l.buf[last]))-p.window {
				return first + p.window
			}
		}
	}
	var d ringlimit.Decision
	decide(&d, s, alg, p, now, 1, false)
	if d.Allowed {
		return now
	}
	return now + int64(d.RetryAfter/time.Millisecond) // RetryAfter is whole ms
}
