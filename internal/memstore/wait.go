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
	epoch int64 // the epoch of the state it was reserved in (see newEpoch)
	queue int64 // a window waiter's: 1 + the window index it joined the key's queue at (0: none)
}

// A bucket's state carries an epoch (state.c, which the buckets do not
// otherwise use; State.C where the state travels): the identity of the
// state a reservation was made in, so that its cancel gives its hits back
// only to that state. A bucket's state gets one at its first reservation
// (0 means none yet), keeps it through every decision on it, and loses it
// with the state: a Reset, an eviction, an expiry or a change of algorithm
// or window starts the key afresh, with no epoch, and the next reservation
// gives it a new one. A cancel whose epoch is not the state's is dropped,
// and counted (Stats.StaleCancels): without it, a waiter that gave up
// after a Reset put its hits into the new state, and the key admitted
// twice its capacity.
//
// Epochs come from a counter that starts at a random value, masked to 52
// bits (remote's scripts keep them in a double, and write their own from
// the server's clock in µs): two states of one key share one only if 2^52
// epochs were handed out between them, or by a chance of 2^-52 against a
// state that came from another member or the store.
const epochMask = 1<<52 - 1

// newEpoch returns an epoch for a bucket's state that has none: never 0.
func (l *Limiter) newEpoch() int64 {
	for {
		if e := int64(l.epochs.Add(1) & epochMask); e != 0 {
			return e
		}
	}
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
		} else {
			l.CancelAt(l.clockNow(), r) // a window waiter leaves the key's queue
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
		// Nothing reserved: ask again at At, the waiter's place in the
		// key's queue (see windowQueues).
		q := &s.l.queues
		idx := floorDiv(now, p.window)
		ahead := q.place(key, p.window, idx, p.limit, n, false)
		laps, k := ahead/p.limit, ahead%p.limit+n
		if k > p.limit {
			laps, k = laps+1, n
		}
		var dk ringlimit.Decision
		decide(&dk, &st, alg, p, now, k, false)
		at := now + dk.RetryAfter.Milliseconds() + laps*p.window
		r.At, r.Decision = time.UnixMilli(at), d
		if limit != 0 && at > limit {
			return s.tooLong(r, key, n)
		}
		q.place(key, p.window, idx, p.limit, n, true)
		r.queue = idx + 1
		return nil
	}
	// A bucket: the hits go in now, and act when the bucket allows them:
	// a token bucket's once its level is back within the capacity, a leaky
	// bucket's when the queue ahead of them has drained (the Delay AllowN
	// would give them, which WaitN waits too). A leased token bucket's
	// level is first settled to its floor (floor.go); the floor is never
	// above the capacity, so it does not hold up the hits' level on its
	// way down to it.
	var keep int64
	if alg == ringlimit.TokenBucket && s.hasFloors() {
		keep = s.floorAt(key, tag, &st, p, now)
	}
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
	until := max(t+p.perLimit.ceil(after), keep)
	if !ok {
		i = none
	}
	epoch := st.c
	if epoch == 0 {
		epoch = s.l.newEpoch()
	}
	s.record(key, frag, i, 0, tag, &state{a: after, b: t, c: epoch}, until, now)
	r.t, r.level, r.act, r.epoch = t, after, act, epoch
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
// their time to act has not come. If no units were reserved after r's (or
// all that were are holes of waiters who gave up too), they come back at
// once; else they stay, as a hole, until every waiter above them has
// given up too, and then the holes come back together, so that a bucket
// nobody waits on any longer admits as if none of them had come (holes.go
// says how, and why no waiter then acts later than promised, nor does the
// bucket admit more than its rule). The level never falls below empty. It
// does nothing for a reservation that consumed at once or reserved
// nothing, and drops (counting it in Stats.StaleCancels) one whose state
// is not the key's state now: the state left (Reset, a hand-off,
// eviction, expiry) or was started afresh since, which its epoch tells.
//
// For a window waiter that was denied (Decision not Allowed), it takes its
// hits out of the key's queue instead (see windowQueues).
func (l *Limiter) CancelAt(now time.Time, r Reservation) {
	if r.queue > 0 && r.key != "" && r.n > 0 {
		if w := r.rule.WindowMillis(); w > 0 && r.rule.Limit > 0 {
			l.queues.leave(r.key, w, floorDiv(now.UnixMilli(), w), r.rule.Limit, r.n)
		}
		return
	}
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
		s.l.stale.Add(1)
		return
	}
	e := s.at(i)
	if e.tag&^dirtyBit != tagOf(r.rule.Algorithm, 0, p) || e.until <= now || e.st.c != r.epoch {
		s.l.stale.Add(1)
		return
	}
	var keep int64
	if r.rule.Algorithm == ringlimit.TokenBucket && s.hasFloors() {
		keep = s.floorAt(r.key, e.tag&^dirtyBit, &e.st, p, now) // (a level the cancel takes below the floor comes back to it at the next settle)
	}
	t := max(now, e.st.b)
	if t >= r.act {
		return // its turn came: the hits are spent
	}
	level := drain(e.st.a, t-e.st.b, p.limit)
	top := drain(r.level, t-r.t, p.limit) // r's top, as a level at t (see holes.go)
	q := &s.holes
	rec, had := q.get(r.key)
	var buf [maxRuns + 2]run
	runs, deep := holesAt(buf[:0], rec, e.st.c, p.window, p.limit, t)
	nl, runs, deep := cancelRuns(level, top, r.n*p.window, runs, deep)
	switch {
	case len(runs) > 0 || deep.h > 0:
		q.put(r.key, holeRecord{epoch: e.st.c, window: p.window, limit: p.limit, tau: t, top: nl, deep: deep, runs: append([]run(nil), runs...)})
	case had:
		q.forget(r.key)
	}
	if nl == level {
		return
	}
	e.st.a, e.st.b = nl, t
	e.until = max(t+p.perLimit.ceil(nl), keep)
	*s.denyAt(i) = 0
	if s.track && e.tag&dirtyBit == 0 {
		e.tag |= dirtyBit
		s.dirty = append(s.dirty, i)
	}
}

// Ticket is what CancelAt needs of a bucket's reservation beyond its key
// and rule: a node that reserved for a waiter on another member sends it
// there, and gets it back with the waiter's cancel (CancelTicket). Act is
// zero for a reservation that has nothing to give back. Epoch is the
// epoch of the state it was reserved in (see CancelAt): a ticket with
// another gives nothing back. A denied window waiter's ticket has Act 0
// and T its place's window index + 1: its cancel leaves the key's queue.
type Ticket struct{ N, T, Level, Act, Epoch int64 }

// Ticket is r's ticket.
func (r Reservation) Ticket() Ticket {
	if r.queue > 0 {
		return Ticket{N: r.n, T: r.queue}
	}
	return Ticket{N: r.n, T: r.t, Level: r.level, Act: r.act, Epoch: r.epoch}
}

// CancelTicket is CancelAt for the reservation of n hits on key under rule
// that tk stands for. A ticket comes from another member: one that does
// not fit the rule (no hits, or more than its capacity) gives nothing back,
// and no ticket gives back more than its own hits at once (see CancelAt).
func (l *Limiter) CancelTicket(now time.Time, key string, rule ringlimit.Rule, tk Ticket) {
	alg := rule.Algorithm
	if tk.Act == 0 && tk.T > 0 && tk.N > 0 && alg != ringlimit.TokenBucket && alg != ringlimit.LeakyBucket {
		if ringlimit.ValidateCall(key, rule, tk.N) == nil {
			l.CancelAt(now, Reservation{key: key, rule: rule, n: tk.N, queue: tk.T})
		}
		return
	}
	if ringlimit.ValidateCall(key, rule, tk.N) != nil || tk.N <= 0 || tk.Act <= 0 || tk.T < 0 || tk.Level < 0 || tk.Epoch <= 0 {
		l.stale.Add(1)
		return
	}
	l.CancelAt(now, Reservation{key: key, rule: rule, n: tk.N, t: tk.T, level: tk.Level, act: tk.Act, epoch: tk.Epoch})
}
