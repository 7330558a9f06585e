package remote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
)

// waitSet is the buckets' reservation and its cancel (see
// ringlimit.Waiter). Not retryable: a retry of either after it ran would
// charge, or give back, twice.
type waitSet struct{ reserve, cancel *valkey.Lua }

var waitScripts = buildWait(func(s string) string { return s })

// buildWait compiles the scripts, each source passed through edit (tests
// pad the TTLs).
func buildWait(edit func(string) string) *waitSet {
	return &waitSet{
		reserve: valkey.NewLuaScript(edit(source("value.lua", "prelude.lua", "read.lua", "reserve_bucket.lua"))),
		cancel:  valkey.NewLuaScript(edit(source("value.lua", "prelude.lua", "read.lua", "cancel_bucket.lua"))),
	}
}

// cancelTimeout bounds the round trip that gives a reservation back after
// the waiter's own context ended.
const cancelTimeout = time.Second

var _ ringlimit.Waiter = (*Limiter)(nil)

// Wait is shorthand for WaitN(ctx, key, rule, 1).
func (l *Limiter) Wait(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return l.WaitN(ctx, key, rule, 1)
}

// WaitN blocks until n hits on key under rule are admitted (see
// ringlimit.Waiter). A bucket takes one round trip: a script reserves the
// hits and answers when they act, and WaitN sleeps until then on one
// timer; a second round trip gives them back only if ctx ends first. A
// window or a log takes one round trip per try: the key's script admits
// the hits or answers when it would, WaitN sleeps until then and tries
// again (they cannot reserve: ringlimit.Waiter says why).
//
// Bad input, and a wait that would outlast ctx's deadline
// (ringlimit.ErrWaitTooLong), return an error at once and consume nothing;
// an ended ctx returns an error wrapping ctx.Err(). n == 0 waits for
// nothing and returns a Peek's Decision.
func (l *Limiter) WaitN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if err := ringlimit.ValidateCall(key, rule, n); err != nil {
		return ringlimit.Decision{}, err
	}
	if n == 0 {
		return l.decide(ctx, key, rule, 0)
	}
	for {
		by, _ := ctx.Deadline()
		d, at, cancel, err := l.Reserve(ctx, key, rule, n, by)
		if err != nil {
			return ringlimit.Decision{}, err
		}
		wait := time.Until(at)
		if d.Allowed && wait <= 0 {
			return d, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
			if d.Allowed {
				return d, nil
			}
			continue // a window or a log: try again
		case <-ctx.Done():
			t.Stop()
		}
		if d.Allowed && !time.Now().Before(at) {
			return d, nil // the timer and ctx came together: the turn is here
		}
		if cancel != nil {
			cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
			_ = cancel(cctx) // a store that does not answer keeps the hits: the waiter gives up anyway
			stop()
		}
		return ringlimit.Decision{}, fmt.Errorf("remote: wait on %s: %w", strconv.Quote(key), ctx.Err())
	}
}

// Reserve is one try of WaitN, in one round trip, for a caller that sleeps
// itself (package failover bounds the round trip by its call timeout, not
// the wait). For a bucket, the hits are consumed at once and d (Allowed)
// is their admitting Decision as of at, when they act; cancel gives them
// back if the caller will not act, in a round trip of its own, as
// memstore's cancel does (at once if no live reservation lies above them,
// else once none does: see HoleKey), and only to the state they were
// reserved in: after a Reset, or once the key's state was
// started afresh, it gives nothing back (counted: StaleCancels). For a window or
// a log, d is the key's decision now: if Allowed, the hits were consumed
// and at is now; if not, nothing was, and at is when to try again; cancel
// is nil. at is on the system clock (now plus the wait the script
// answered). If by is not zero and the hits would act after it, or a
// bucket's queue reaches no further (see ringlimit.Waiter), nothing is
// consumed and err wraps ringlimit.ErrWaitTooLong.
func (l *Limiter) Reserve(ctx context.Context, key string, rule ringlimit.Rule, n int64, by time.Time) (d ringlimit.Decision, at time.Time, cancel func(context.Context) error, err error) {
	if err := ringlimit.ValidateCall(key, rule, n); err != nil {
		return d, at, nil, err
	}
	if rule.Algorithm != ringlimit.TokenBucket && rule.Algorithm != ringlimit.LeakyBucket {
		d, err = l.decide(ctx, key, rule, n)
		if err != nil || d.Allowed {
			return d, time.Now(), nil, err
		}
		at = time.Now().Add(d.RetryAfter)
		if !by.IsZero() && at.After(by) {
			return ringlimit.Decision{}, at, nil, fmt.Errorf("remote: reserve %d on %s: would act after the deadline: %w", n, strconv.Quote(key), ringlimit.ErrWaitTooLong)
		}
		return d, at, nil, nil
	}
	if err := ctx.Err(); err != nil {
		return d, at, nil, fmt.Errorf("remote: reserve %s: %w", rule.Algorithm, err)
	}
	now := ""
	if l.clock != nil {
		now = strconv.FormatInt(l.clock.Now().UnixMilli(), 10)
	}
	maxWait := ""
	if !by.IsZero() {
		maxWait = strconv.FormatInt(max(-1, int64(time.Until(by)/time.Millisecond)), 10)
	}
	args := []string{ruleArg(rule), now, strconv.FormatInt(n, 10), maxWait}
	resp := l.wait.reserve.Exec(ctx, l.client, []string{l.Key(key)}, args)
	if err := resp.Error(); err != nil {
		return d, at, nil, fmt.Errorf("remote: reserve %s: %w", rule.Algorithm, callerErr(ctx, err))
	}
	v, err := resp.ToString()
	if err == nil && v == badValue {
		return d, at, nil, fmt.Errorf("remote: reserve %s: key %s: %w", rule.Algorithm, strconv.Quote(key), ErrBadValue)
	}
	if err != nil {
		return d, at, nil, fmt.Errorf("remote: reserve %s: unexpected reply %s: %w", rule.Algorithm, resp.String(), err)
	}
	r, err := parseReserve(v, rule, n)
	if err != nil {
		return d, at, nil, fmt.Errorf("remote: reserve %s: %w", rule.Algorithm, err)
	}
	at = time.Now().Add(ringlimit.Millis(r.wait))
	switch r.status {
	case reserveLate:
		return d, at, nil, fmt.Errorf("remote: reserve %d on %s: would act after the deadline: %w", n, strconv.Quote(key), ringlimit.ErrWaitTooLong)
	case reserveFull:
		return d, at, nil, fmt.Errorf("remote: reserve %d on %s: the queue reaches no further: %w", n, strconv.Quote(key), ringlimit.ErrWaitTooLong)
	}
	d = r.decision(rule)
	if r.wait == 0 {
		return d, at, nil, nil // admitted now: nothing to give back
	}
	cancel = func(ctx context.Context) error {
		args := []string{ruleArg(rule), now, strconv.FormatInt(n, 10),
			strconv.FormatInt(r.t, 10), strconv.FormatInt(r.level, 10), strconv.FormatInt(r.t+r.wait-r.late, 10)}
		if l.clock != nil {
			args[1] = strconv.FormatInt(l.clock.Now().UnixMilli(), 10)
		}
		args = append(args, strconv.FormatInt(r.epoch, 10))
		resp := l.wait.cancel.Exec(ctx, l.client, []string{l.Key(key), l.HoleKey(key)}, args)
		if err := resp.Error(); err != nil {
			return fmt.Errorf("remote: cancel %s: %w", rule.Algorithm, callerErr(ctx, err))
		}
		if v, err := resp.AsInt64(); err == nil && v < 0 {
			l.staleCancels.Add(1) // the key's state is not the one the hits were reserved in
		}
		return nil
	}
	return d, at, cancel, nil
}

// HoleKey is where the cancel script keeps key's hole record: the
// reservations cancelled under live ones, whose units come back once no
// live reservation lies above them (internal/memstore/holes.go; the
// record's layout is in scripts/cancel_bucket.lua). It is Key(key) +
// "#h", in the key's hash slot; no key's Key ends that way (see
// IndexKey). The record is a hint: one that is lost or foreign only keeps
// those units in the level until it drains.
func (l *Limiter) HoleKey(key string) string { return l.Key(key) + "#h" }

// A reservation script's status.
const (
	reserveOK   = 1 // reserved
	reserveLate = 2 // past the caller's deadline: nothing written
	reserveFull = 3 // past the queue's reach: nothing written
)

// reserved is a reservation script's reply.
type reserved struct {
	status int64
	wait   int64 // ms from the script's now until the hits act
	level  int64 // the bucket's level just after (units of 1/Window of a hit)
	t      int64 // the state's instant (ms): the later of the script's now and its last update
	late   int64 // t − the script's now: a clock behind the state's
	epoch  int64 // the state's epoch (the cancel names it); 0 if nothing was reserved
}

// errBadReply: a reservation script's reply that no script of ours sends.
var errBadReply = errors.New("remote: bad reply")

// parseReserve decodes and checks a reservation script's reply for n hits
// under rule. The store is not trusted: a reply that the script could not
// have sent for them is an error wrapping errBadReply.
func parseReserve(v string, rule ringlimit.Rule, n int64) (reserved, error) {
	if len(v) != 5*8 {
		return reserved{}, fmt.Errorf("%w: %d bytes", errBadReply, len(v))
	}
	r := reserved{status: word(v, 0), wait: word(v, 1), level: word(v, 2), t: word(v, 3), epoch: word(v, 4)}
	const exact = 1 << 53
	w := rule.WindowMillis()
	full := rule.Capacity() * w
	switch {
	case r.status < reserveOK || r.status > reserveFull:
		return reserved{}, fmt.Errorf("%w: status %d", errBadReply, r.status)
	case r.wait < 0 || r.wait >= exact:
		return reserved{}, fmt.Errorf("%w: wait %d", errBadReply, r.wait)
	case r.t < 0 || r.t >= exact:
		return reserved{}, fmt.Errorf("%w: instant %d", errBadReply, r.t)
	case r.level < n*w || r.level >= exact || r.status == reserveOK && r.level > full+1<<51:
		return reserved{}, fmt.Errorf("%w: level %d", errBadReply, r.level)
	case r.epoch < 0 || r.epoch >= exact || r.status == reserveOK && r.epoch == 0:
		return reserved{}, fmt.Errorf("%w: epoch %d", errBadReply, r.epoch)
	}
	// The wait the level implies, from t (so at most the wait from now).
	var need int64
	if rule.Algorithm == ringlimit.TokenBucket {
		need = max(0, ceilDiv(r.level-full, rule.Limit))
	} else {
		need = ceilDiv(r.level-n*w, rule.Limit)
	}
	if r.wait < need {
		return reserved{}, fmt.Errorf("%w: wait %d for level %d", errBadReply, r.wait, r.level)
	}
	r.late = r.wait - need
	return r, nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// decision is the admitting Decision of a reservation, as of its time to
// act (local/wait.go: bucketAt). A leaky bucket's has no Delay: WaitN
// waited it.
func (r reserved) decision(rule ringlimit.Rule) ringlimit.Decision {
	w, limit, burst := rule.WindowMillis(), rule.Limit, rule.Capacity()
	lv := max(0, r.level-(r.wait-r.late)*limit)
	d := ringlimit.Decision{Allowed: true, Limit: limit, ResetAfter: ringlimit.Millis(ceilDiv(lv, limit)), Source: ringlimit.Store}
	if rule.Algorithm == ringlimit.LeakyBucket {
		d.Remaining = max(0, burst-lv/w)
	} else if full := burst * w; lv < full {
		d.Remaining = (full - lv) / w
	}
	return d
}

// StaleCancels is how many waiters' cancels gave nothing back, since l was
// made, because the key's state was no longer the one their hits were
// reserved in (a Reset, an expiry, or a change of algorithm or window
// started it afresh; the scripts tell by the state's epoch).
func (l *Limiter) StaleCancels() uint64 { return l.staleCancels.Load() }
