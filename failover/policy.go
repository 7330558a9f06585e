package failover

import (
	"context"
	"strconv"

	"github.com/ringlimit/ringlimit"
)

// Policy says how a Limiter decides when its primary cannot answer. Every
// policy's Decision has Source ringlimit.Fallback.
type Policy uint8

const (
	// Open allows every call (fail open): the zero Policy. The Decision is
	// the one a fresh key would get: Allowed, Limit = rule.Limit,
	// Remaining = rule.Capacity() − n (the full capacity for a Peek), no
	// RetryAfter, ResetAfter or Delay.
	Open Policy = iota
	// Closed denies every call (fail closed): Allowed false, Limit =
	// rule.Limit, Remaining 0, and RetryAfter = ResetAfter = Config.Cooldown
	// (in whole ms, rounded up), when the breaker next probes the primary.
	Closed
	// LocalShare decides on Config.Local with the rule's Limit and Burst
	// divided by Config.Share() and rounded up (never below 1), so N nodes
	// that each enforce their share enforce about the whole limit between
	// them. The Decision is the local limiter's for the shared rule: its
	// Limit is the share (so Remaining ≤ Limit holds). An n over the share's
	// capacity is clamped to it: a call the whole rule could admit takes all
	// of this node's share instead of being refused as bad input. If the
	// local limiter returns an error, the call is decided as Open (and a
	// warning is logged once).
	LocalShare

	numPolicies
)

var policyNames = [numPolicies]string{"open", "closed", "local_share"}

func (p Policy) String() string {
	if p < numPolicies {
		return policyNames[p]
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// fallback decides by the policy, for a validated call.
func (l *Limiter) fallback(ctx context.Context, key string, rule ringlimit.Rule, n int64, peek bool) ringlimit.Decision {
	switch l.policy {
	case Closed:
		l.fallbacks[Closed].Add(1)
		return l.closed(rule)
	case LocalShare:
		if d, err := l.localShare(ctx, key, rule, n, peek); err == nil {
			l.fallbacks[LocalShare].Add(1)
			return d
		} else {
			l.sum.Warn("local failed", "failover: local limiter failed; deciding by policy open", "err", err)
		}
	}
	l.fallbacks[Open].Add(1)
	return open(rule, n)
}

// open is the Open policy's Decision for n hits under rule.
func open(rule ringlimit.Rule, n int64) ringlimit.Decision {
	return ringlimit.Decision{
		Allowed:   true,
		Limit:     rule.Limit,
		Remaining: rule.Capacity() - n,
		Source:    ringlimit.Fallback,
	}
}

// closed is the Closed policy's Decision under rule.
func (l *Limiter) closed(rule ringlimit.Rule) ringlimit.Decision {
	return ringlimit.Decision{
		Limit:      rule.Limit,
		RetryAfter: l.retry,
		ResetAfter: l.retry,
		Source:     ringlimit.Fallback,
	}
}

// localShare decides on the local limiter with this node's share of rule.
func (l *Limiter) localShare(ctx context.Context, key string, rule ringlimit.Rule, n int64, peek bool) (ringlimit.Decision, error) {
	shared := shareOf(rule, l.nodes())
	var d ringlimit.Decision
	var err error
	if peek {
		d, err = l.local.Peek(ctx, key, shared)
	} else {
		d, err = l.local.AllowN(ctx, key, shared, min(n, shared.Capacity()))
	}
	d.Source = ringlimit.Fallback
	return d, err
}

// nodes is Config.Share(), at least 1.
func (l *Limiter) nodes() int64 {
	if l.share == nil {
		return 1
	}
	return max(int64(l.share()), 1)
}

// shareOf divides rule's Limit and Burst by nodes, rounding up.
func shareOf(rule ringlimit.Rule, nodes int64) ringlimit.Rule {
	rule.Limit = ceilDiv(rule.Limit, nodes)
	if rule.Burst > 0 {
		rule.Burst = ceilDiv(rule.Burst, nodes)
	}
	return rule
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
