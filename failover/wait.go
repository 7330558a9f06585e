package failover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit"
)

// Reserver is a primary that splits a wait into its round trips, so that
// the call timeout bounds each round trip and not the wait.
// *remote.Limiter is one (see its Reserve): for a bucket, Reserve consumes
// the hits and returns their Decision, the instant at they act and a
// cancel that gives them back; for a window or a log, a Decision that is
// not Allowed says to try again at at, and cancel is nil. If by is not zero
// and the hits would act after it, it consumes nothing and its error wraps
// ringlimit.ErrWaitTooLong.
type Reserver interface {
	Reserve(ctx context.Context, key string, rule ringlimit.Rule, n int64, by time.Time) (d ringlimit.Decision, at time.Time, cancel func(context.Context) error, err error)
}

// ErrPolicyClosed: WaitN could not ask the primary and the policy is
// Closed, so the hits will not be admitted: the wait ends at once.
var ErrPolicyClosed = errors.New("failover: the primary cannot answer and the policy is closed")

var _ ringlimit.Waiter = (*Limiter)(nil)

// Wait is shorthand for WaitN(ctx, key, rule, 1).
func (l *Limiter) Wait(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return l.WaitN(ctx, key, rule, 1)
}

// WaitN blocks until n hits on key under rule are admitted (see
// ringlimit.Waiter).
//
// With a primary that is a Reserver, each reservation is one call through
// the breaker, under the call timeout (Config.Timeout): the timeout bounds
// the round trip, never the wait, which WaitN sleeps here on one timer. A
// waiter whose ctx ends gives its hits back in one more round trip, under
// the call timeout too. A wait that would outlast ctx's deadline
// (ringlimit.ErrWaitTooLong) and an ended ctx are returned as errors: they
// are the caller's, so they never count against the breaker and never fall
// to the policy; neither does bad input.
//
// When the primary cannot answer (it failed, timed out, or the breaker is
// open), the policy decides, at once: Open admits (the Open Decision);
// Closed refuses, returning the Closed Decision with an error wrapping
// ErrPolicyClosed; LocalShare waits on this node's share in Config.Local,
// if it is a ringlimit.Waiter (a *local.Limiter is), else decides as Open.
//
// A primary that is a ringlimit.Waiter but no Reserver (a node, a
// local.Limiter) is handed the whole wait, with the caller's ctx: the
// breaker and the call timeout stay out of it. Any other primary is asked
// by AllowN, through the breaker and the policy, and WaitN sleeps each
// denial's RetryAfter before it asks again.
func (l *Limiter) WaitN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if err := ringlimit.ValidateCall(key, rule, n); err != nil {
		return ringlimit.Decision{}, err
	}
	if n == 0 {
		return l.decide(ctx, key, rule, 0, true)
	}
	res, ok := l.primary.(Reserver)
	if !ok && l.primary != nil {
		if w, ok := l.primary.(ringlimit.Waiter); ok {
			return w.WaitN(ctx, key, rule, n)
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			l.canceled.Add(1)
			return ringlimit.Decision{}, err
		}
		by, _ := ctx.Deadline()
		var d ringlimit.Decision
		var at time.Time
		var cancel func(context.Context) error
		switch {
		case res != nil:
			g := l.shards.breaker(key)
			done, err := g.allow()
			if err != nil {
				return l.waitPolicy(ctx, key, rule, n)
			}
			d, err = l.ask(ctx, g.rto, done, func(ctx context.Context) (ringlimit.Decision, error) {
				d, a, c, err := res.Reserve(ctx, key, rule, n, by)
				at, cancel = a, c
				return d, err
			})
			if err == errFailure {
				return l.waitPolicy(ctx, key, rule, n)
			}
			if err != nil {
				return ringlimit.Decision{}, err
			}
		case l.primary == nil:
			return l.waitPolicy(ctx, key, rule, n)
		default:
			var err error
			if d, err = l.decide(ctx, key, rule, n, false); err != nil {
				return d, err
			}
			if d.Source == ringlimit.Fallback && !d.Allowed {
				return d, fmt.Errorf("failover: wait on %s: %w", strconv.Quote(key), ErrPolicyClosed)
			}
			at = time.Now().Add(d.RetryAfter)
			if !d.Allowed && !by.IsZero() && at.After(by) {
				return ringlimit.Decision{}, fmt.Errorf("failover: wait on %s: would act after the deadline: %w", strconv.Quote(key), ringlimit.ErrWaitTooLong)
			}
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
			continue // not reserved: ask again
		case <-ctx.Done():
			t.Stop()
		}
		if d.Allowed && !time.Now().Before(at) {
			return d, nil // the timer and ctx came together: the turn is here
		}
		if cancel != nil {
			cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
			_ = cancel(cctx) // a primary that does not answer keeps the hits: the waiter gives up anyway
			stop()
		}
		l.canceled.Add(1)
		return ringlimit.Decision{}, fmt.Errorf("failover: wait on %s: %w", strconv.Quote(key), ctx.Err())
	}
}

// waitPolicy is WaitN's answer by the policy, for a validated call.
func (l *Limiter) waitPolicy(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	switch l.policy {
	case Closed:
		l.fallbacks[Closed].Add(1)
		return l.closed(rule), fmt.Errorf("failover: wait on %s: %w", strconv.Quote(key), ErrPolicyClosed)
	case LocalShare:
		if w, ok := l.local.(ringlimit.Waiter); ok {
			shared := shareOf(rule, l.nodes())
			d, err := w.WaitN(ctx, key, shared, min(n, shared.Capacity()))
			switch {
			case err == nil:
				l.fallbacks[LocalShare].Add(1)
				d.Source = ringlimit.Fallback
				return d, nil
			case ctx.Err() != nil:
				l.canceled.Add(1)
				return ringlimit.Decision{}, err
			case errors.Is(err, ringlimit.ErrWaitTooLong):
				return ringlimit.Decision{}, err
			}
			l.sum.Warn("local failed", "failover: local limiter failed; deciding by policy open", "err", err)
		}
	}
	l.fallbacks[Open].Add(1)
	return open(rule, n), nil
}
