package remote

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit"
)

var _ ringlimit.Waiter = (*Connector)(nil)

// Wait is shorthand for WaitN(ctx, key, rule, 1).
func (k *Connector) Wait(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return k.WaitN(ctx, key, rule, 1)
}

// WaitN is the Limiter's WaitN, or ErrNotConnected (after validating the
// input).
func (k *Connector) WaitN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	l, err := k.limiter()
	if err != nil {
		if verr := ringlimit.ValidateCall(key, rule, n); verr != nil {
			return ringlimit.Decision{}, verr
		}
		return ringlimit.Decision{}, fmt.Errorf("remote: wait: %w", err)
	}
	return l.WaitN(ctx, key, rule, n)
}

// Reserve is the Limiter's Reserve, or ErrNotConnected (after validating
// the input), so a failover.Limiter in front of a Connector reserves.
func (k *Connector) Reserve(ctx context.Context, key string, rule ringlimit.Rule, n int64, by time.Time) (ringlimit.Decision, time.Time, func(context.Context) error, error) {
	l, err := k.limiter()
	if err != nil {
		if verr := ringlimit.ValidateCall(key, rule, n); verr != nil {
			return ringlimit.Decision{}, time.Time{}, nil, verr
		}
		return ringlimit.Decision{}, time.Time{}, nil, fmt.Errorf("remote: reserve: %w", err)
	}
	return l.Reserve(ctx, key, rule, n, by)
}

// StaleCancels is the connected Limiter's StaleCancels (0 before it
// connects).
func (k *Connector) StaleCancels() uint64 {
	if l := k.lim.Load(); l != nil {
		return l.StaleCancels()
	}
	return 0
}
