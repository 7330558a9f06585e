package memstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit"
)

// maxQueue is how far past a bucket's capacity reservations may take its
// level (in units of 1/Window of a hit): 2^51, at least one Window of hits
// for any rule that validates. The level then stays below 2^52, and a
// decision's arithmetic on it below 2^53, where remote's scripts compute
// it exactly too.
const maxQueue = 1 << 51

// Reservation is the answer to ReserveN.
//
// If Decision.Allowed, the hits were consumed and may act at At (now, or
// later for a bucket's reservation); Decision is the key's admitting
// Decision as of At. A caller that will not act gives them back with
// CancelAt. If not, nothing was consumed: the rule's algorithm does not
// reserve ahead (the windows and the log, see ringlimit.Waiter), and At is
// when the key would admit the hits; ask again then.
type Reservation struct {
	Decision ringlimit.Decision
	At       time.Time

	key   string
	rule  ringlimit.Rule
	n     int64
	t     int64 // the instant (ms) the state was reserved at
	level int64 // the bucket's level just after, at t
	act   int64 // At in ms; 0: nothing to give back
}

// Wait is shorthand for WaitN(ctx, key, rule, 1).
func (l *Limiter) Wait(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return l.WaitN(ctx, key, rule, 1)
}

var _ ringlimit.Waiter = (*Limiter)(nil)

// WaitN blocks until n hits on key under rule are admitted (see
// ringlimit.Waiter): it reserves them with ReserveN and sleeps on one
// timer until their time to act. It returns an error at once, consuming
// nothing, for bad input (n above the rule's capacity: ErrInvalidHits) and
// for a wait that would outlast ctx's deadline (ErrWaitTooLong). If ctx
// ends first, a bucket's reservation is given back (CancelAt) and the
// error wraps ctx.Err(). n == 0 waits for nothing and returns a Peek's
// Decision.
//
// The Limiter's Clock tells the instants; the sleep is the time.Timer's.
func (l *Limiter) WaitN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	for {
		if err := ctx.Err(); err != nil {
			return ringlimit.Decision{}, fmt.Errorf("local: wait on %s: %w", strconv.Quote(key), err)
		}
		now := l.clockNow()
		var by time.Time
		if dl, ok := ctx.Deadline(); ok {
			by = now.Add(time.Until(dl)) // ctx's deadline on the Limiter's clock
		}
		r, err := l.ReserveN(now, key, rule, n, by)
		if err != nil {
			return ringlimit.Decision{}, err
		}
		if n == 0 {
			return r.Decision, nil
		}
		wait := r.At.Sub(now)
		if r.Decision.Allowed && wait <= 0 {
			return r.Decision, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			if r.Decision.Allowed {
				return r.Decision, nil
			}
			continue // a window or a log: ask again
		case <-ctx.Done():
			t.Stop()
		}
		if r.Decision.Allowed {
			now := l.clockNow()
			if !now.Before(r.At) { // the timer and ctx came together: the turn is here
				return r.Decision, nil
			}
			l.CancelAt(now, r)
		}
		return ringlimit.Decision{}, fmt.Errorf("local: wait on %s: %w", strconv.Quote(key), ctx.Err())
	}
}

// clockNow reads the clock as a time.Time.
func (l *Limiter) clockNow() time.Time {
	if l.clock == nil {
		return time.Now()
	}
	return l.clock.Now()
}

// ReserveN reserves n hits on key under rule at now, for a caller that
// will wait for them: a key whose rule admits them now consumes them as
// AllowNAt does (At is now); a bucket that does not consumes them anyway
// (its level may pass its capacity, by at most 2^51 units) and At is the
// instant they fit. A window or a log that does not admit them consumes
// nothing (see Reservation). If by is not zero and At is after it, or the
// bucket's queue reaches no further, ReserveN consumes nothing and
// returns an error wrapping ringlimit.ErrWaitTooLong (with At set).
//
// It is the owner's half of WaitN: a node that owns a key can reserve for
// a waiter forwarded from another member and send it At, and cancel for
// it (CancelAt) if it gives up. n == 0 is a Peek.
func (l *Limiter) ReserveN(now time.Time, key string, rule ringlimit.Rule, n int64, by time.Time) (Reservation, error) {
	if uint(len(key)-1) >= ringlimit.MaxKeyLen {
		return Reservation{}, ringlimit.ValidateKey(key)
	}
	s, frag := l.locate(key)
	r := Reservation{key: key, rule: rule, n: n}
	limit := int64(0)
	if !by.IsZero() {
		limit = max(by.UnixMilli(), 1) // whole ms at or before by; one at or before the epoch lets nothing fit
	}
	err := s.reserve(&r, key, frag, rule, now.UnixMilli(), n, limit)
	return r, err
}

// reserve is ReserveN under the shard's lock; limit is the latest instant
// (ms) the hits may act at, 0 for none.
func (s *shard) reserve(r *Reservation, key string, frag uint32, rule ringlimit.Rule, now, n, limit int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rule != s.rule || s.p.window == 0 {
		if err := rule.Validate(); err != nil {
			return err
		}
		s.rule, s.p = rule, paramsOf(rule)
	}
	if uint64(n) > uint64(s.p.burst) {
		return ringlimit.ValidateCall(key, rule, n)
	}
	r.At = time.UnixMilli(now)
	alg, p := rule.Algorithm, &s.p
	i, ok := s.lookup(key, frag, 0)
	if n == 0 {
		s.decideAt(&r.Decision, key, frag, i, ok, 0, alg, p, now, 1, false)
		return nil
	}
	tag := tagOf(alg, 0, p)
	var st state
	if ok {
		if e := s.at(i); e.tag&^dirtyBit == tag && e.until > now {
			st = e.st
		}
	}
	if alg != ringlimit.TokenBucket && alg != ringlimit.LeakyBucket {
		var d ringlimit.Decision
		decide(&d, &st, alg, p, now, n, false) // a peek: a log is only read
		if d.Allowed {
			s.decideAt(&r.Decision, key, frag, i, ok, 0, alg, p, now, n, true)
			return nil
		}
		r.At, r.Decision = time.UnixMilli(now).Add(d.RetryAfter), d // nothing reserved: ask again at At
		if limit != 0 && r.At.UnixMilli() > limit {
			return s.tooLong(r, key, n)
		}
		return nil
	}
	// A bucket: the hits go in now, and act when the bucket allows them:
	// a token bucket's once its level is back within the capacity, a leaky
	// bucket's when the queue ahead of them has drained (the Delay AllowN
	// would give them, which WaitN waits too).
	t := max(now, st.b)
	level := drain(st.a, t-st.b, p.limit)
	after, full := level+n*p.window, p.burst*p.window
	var wait int64
	if alg == ringlimit.TokenBucket {
		wait = max(0, ceilDiv(after-full, p.limit))
	} else {
		wait = ceilDiv(level, p.limit)
	}
	if wait == 0 {
		s.decideAt(&r.Decision, key, frag, i, ok, 0, alg, p, now, n, true)
		return nil
	}
	act := t + wait
	r.At = time.UnixMilli(act)
	if limit != 0 && act > limit {
		return s.tooLong(r, key, n)
	}
	if after > full+maxQueue {
		return fmt.Errorf("local: reserve %d on %s: the queue reaches no further: %w", n, strconv.Quote(key), ringlimit.ErrWaitTooLong)
	}
	until := t + p.perLimit.ceil(after)
	if !ok {
		i = none
	}
	s.record(key, frag, i, 0, tag, &state{a: after, b: t}, until, now)
	r.t, r.level, r.act = t, after, act
	r.Decision = bucketAt(p, alg == ringlimit.LeakyBucket, after, wait)
	if i, ok := s.lookup(key, frag, 0); ok {
		s.exhausted(i, &r.Decision, alg, p, now, n) // eviction spares a key that denies
	}
	return nil
}

// tooLong is reserve's refusal of a wait past the deadline.
func (s *shard) tooLong(r *Reservation, key string, n int64) error {
	return fmt.Errorf("local: reserve %d on %s: would act at %s, after the deadline: %w",
		n, strconv.Quote(key), r.At.UTC().Format(time.RFC3339Nano), ringlimit.ErrWaitTooLong)
}

// bucketAt is the admitting Decision, as of their time to act, of hits
// reserved wait ms after the instant a bucket's level became after (their
// own units included). A leaky bucket's has no Delay: WaitN waited it.
func bucketAt(p *params, leaky bool, after, wait int64) ringlimit.Decision {
	lv := max(0, after-wait*p.limit) // at the time to act
	d := ringlimit.Decision{Allowed: true, Limit: p.limit, ResetAfter: ms(ceilDiv(lv, p.limit))}
	if leaky {
		d.Remaining = max(0, p.burst-lv/p.window)
	} else if full := p.burst * p.window; lv < full {
		d.Remaining = (full - lv) / p.window
	}
	return d
}

// CancelAt gives back at now the hits r reserved ahead on a bucket, if
// their time to act has not come: all of them if no waiter reserved after
// r, else as many as those later waiters were not promised (x/time/rate's
// rule), so no waiter acts earlier than the bucket allows. The level never
// falls below empty. It does nothing for a reservation that consumed at
// once or reserved nothing, and for a key whose state left (Reset, a
// hand-off, eviction).
func (l *Limiter) CancelAt(now time.Time, r Reservation) {
	if r.act == 0 || r.key == "" {
		return
	}
	s, frag := l.locate(r.key)
	s.cancel(&r, frag, now.UnixMilli())
}

// Cancel is CancelAt at the clock's now.
func (l *Limiter) Cancel(r Reservation) { l.CancelAt(l.clockNow(), r) }

func (s *shard) cancel(r *Reservation, frag uint32, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.rule != s.rule || s.p.window == 0 {
		if r.rule.Validate() != nil {
			return
		}
		s.rule, s.p = r.rule, paramsOf(r.rule)
	}
	p := &s.p
	i, ok := s.lookup(r.key, frag, 0)
	if !ok {
		return
	}
	e := s.at(i)
	if e.tag&^dirtyBit != tagOf(r.rule.Algorithm, 0, p) || e.until <= now {
		return
	}
	t := max(now, e.st.b)
	if t >= r.act {
		return // its turn came: the hits are spent
	}
	level := drain(e.st.a, t-e.st.b, p.limit)
	later := max(0, level-drain(r.level, t-r.t, p.limit)) // units reserved after r
	give := r.n*p.window - later
	if give <= 0 {
		return
	}
	level = max(0, level-give)
	e.st.a, e.st.b = level, t
	e.until = t + p.perLimit.ceil(level)
	*s.denyAt(i) = 0
	if s.track && e.tag&dirtyBit == 0 {
		e.tag |= dirtyBit
		s.dirty = append(s.dirty, i)
	}
}

// Ticket is what CancelAt needs of a bucket's reservation beyond its key
// and rule: a node that reserved for a waiter on another member sends it
// there, and gets it back with the waiter's cancel (CancelTicket). Act is
// zero for a reservation that has nothing to give back.
type Ticket struct{ N, T, Level, Act int64 }

// Ticket is r's ticket.
func (r Reservation) Ticket() Ticket { return Ticket{N: r.n, T: r.t, Level: r.level, Act: r.act} }

// CancelTicket is CancelAt for the reservation of n hits on key under rule
// that tk stands for. A ticket comes from another member: one that does
// not fit the rule (no hits, or more than its capacity) gives nothing back,
// and no ticket gives back more than its own hits, or more than later
// reservations leave (see CancelAt).
func (l *Limiter) CancelTicket(now time.Time, key string, rule ringlimit.Rule, tk Ticket) {
	if ringlimit.ValidateCall(key, rule, tk.N) != nil || tk.N <= 0 || tk.Act <= 0 || tk.T < 0 || tk.Level < 0 {
		return
	}
	l.CancelAt(now, Reservation{key: key, rule: rule, n: tk.N, t: tk.T, level: tk.Level, act: tk.Act})
}
