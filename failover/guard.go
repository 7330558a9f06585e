package failover

import (
	"context"
	"errors"
	"time"
)

// Guard runs call, a use of the primary that is not a decision (a node
// writing key states behind to the store), through the breaker, so that
// the breaker, State and Stats see a primary that fails even when no
// decision asks it, and a primary known to be down is left alone.
//
// If the breaker is open, Guard returns ErrOpen at once without calling. Else
// it calls call with ctx bounded by timeout (if positive) and reports the
// outcome to the breaker: nil is a success (it closes a half-open breaker);
// an error is a failure, counted in Stats.Timeouts if the timeout expired,
// else in Stats.PrimaryErrors. If ctx itself is done, the outcome is
// ignored and ctx.Err() returned. Otherwise call's error is returned as-is.
//
// With Config.Shard, Guard uses the breaker of the unknown shard "": a call
// that spans shards says nothing of any one of them.
func (l *Limiter) Guard(ctx context.Context, timeout time.Duration, call func(context.Context) error) error {
	done, err := l.breaker.allow()
	if err != nil {
		return err
	}
	reported := false
	defer func() {
		if !reported { // call panicked: a failure, or a half-open breaker would wait for this probe forever
			done(errFailure)
		}
	}()
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, timeout)
	}
	err = call(cctx)
	timedOut := err != nil && (cctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded))
	cancel()
	reported = true
	switch {
	case err == nil:
		done(nil)
		return nil
	case ctx.Err() != nil: // the caller gave up: not the primary's fault
		done(errIgnored)
		l.canceled.Add(1)
		return ctx.Err()
	}
	done(errFailure)
	if timedOut {
		l.timeouts.Add(1)
	} else {
		l.primaryErrors.Add(1)
	}
	return err
}
