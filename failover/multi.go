package failover

import (
	"context"
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit"
)

var _ ringlimit.MultiLimiter = (*Limiter)(nil)

// ErrNoAllowAll: AllowAll was called on a Limiter whose primary does not
// implement ringlimit.MultiLimiter. It wraps errors.ErrUnsupported.
var ErrNoAllowAll = fmt.Errorf("failover: primary has no AllowAll: %w", errors.ErrUnsupported)

// AllowAll applies every rule to key at once, all or nothing, on the
// primary's AllowAll (see ringlimit.MultiLimiter), through the breaker as
// AllowN goes: one call to the primary, one outcome for the breaker, one
// decision in Stats. If the primary cannot answer, every rule is decided by
// the policy: Open admits under each rule, Closed denies under each, and
// LocalShare calls Config.Local's AllowAll (if it has one; else Open) with
// each rule's share, n clamped to the smallest share's capacity. A nil
// primary decides by the policy; a primary without AllowAll gets
// ErrNoAllowAll. Errors are as for AllowN.
func (l *Limiter) AllowAll(ctx context.Context, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	if err := ringlimit.ValidateRules(rules); err != nil {
		return nil, err
	}
	for i, r := range rules {
		if err := ringlimit.ValidateCall(key, r, n); err != nil {
			return nil, fmt.Errorf("rules[%d]: %w", i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		l.canceled.Add(1)
		return nil, err
	}
	if l.primary == nil {
		return l.fallbackAll(ctx, key, rules, n), nil
	}
	primary, ok := l.primary.(ringlimit.MultiLimiter)
	if !ok {
		return nil, ErrNoAllowAll
	}
	g := l.shards.breaker(key)
	done, err := g.allow()
	if err != nil {
		return l.fallbackAll(ctx, key, rules, n), nil
	}
	var ds []ringlimit.Decision
	_, err = l.ask(ctx, g.rto, done, func(ctx context.Context) (ringlimit.Decision, error) {
		var err error
		ds, err = primary.AllowAll(ctx, key, rules, n)
		return ringlimit.Decision{}, err
	})
	if err == errFailure {
		return l.fallbackAll(ctx, key, rules, n), nil
	}
	if err != nil {
		return nil, err
	}
	return ds, nil
}

// fallbackAll decides every rule by the policy, for a validated call: one
// fallback in Stats.
func (l *Limiter) fallbackAll(ctx context.Context, key string, rules []ringlimit.Rule, n int64) []ringlimit.Decision {
	ds := make([]ringlimit.Decision, len(rules))
	switch l.policy {
	case Closed:
		l.fallbacks[Closed].Add(1)
		for i, r := range rules {
			ds[i] = l.closed(r)
		}
		return ds
	case LocalShare:
		err := ErrNoAllowAll
		if m, ok := l.local.(ringlimit.MultiLimiter); ok {
			var shared [ringlimit.MaxRules]ringlimit.Rule
			nodes, most := l.nodes(), n
			for i, r := range rules {
				shared[i] = shareOf(r, nodes)
				most = min(most, shared[i].Capacity())
			}
			var got []ringlimit.Decision
			if got, err = m.AllowAll(ctx, key, shared[:len(rules)], most); err == nil {
				l.fallbacks[LocalShare].Add(1)
				for i := range got {
					got[i].Source = ringlimit.Fallback
				}
				return got
			}
		}
		l.sum.Warn("local failed", "failover: local limiter failed; deciding by policy open", "err", err)
	}
	l.fallbacks[Open].Add(1)
	for i, r := range rules {
		ds[i] = open(r, n)
	}
	return ds
}
