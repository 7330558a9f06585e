package seedsteps

import (
	"time"

	"github.com/ringlimit/ringlimit"
)

// OverflowCases are rules at the edge of the exact domain whose durations do
// not fit a time.Duration: every such Decision duration must be
// ringlimit.MaxDuration, in every tier (issue 14, item 1).
func OverflowCases() []Case {
	const day = 24 * time.Hour
	const most = ringlimit.MaxDuration
	return []Case{{
		// The reproduction: 150,000 hits a day's worth each ≈ 4.1e5 years.
		Name: "token bucket, limit 1 per 24h, burst 200000",
		Rule: ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1, Window: day, Burst: 200_000},
		Steps: []Step{
			{At: t0, N: 150_000, Allowed: true, Remaining: 50_000, ResetAfter: most},
			{At: t0, N: 0, Allowed: true, Remaining: 50_000, ResetAfter: most},
			{At: t0, N: 60_000, Remaining: 50_000, RetryAfter: 10_000 * day, ResetAfter: most},
			{At: t0, N: 200_000, Remaining: 50_000, RetryAfter: most, ResetAfter: most},
		},
	}, {
		// DESIGN's domain: Limit 1, Burst 1e6, Window 24 h.
		Name: "leaky bucket, limit 1 per 24h, burst 1e6",
		Rule: ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 1, Window: day, Burst: 1_000_000},
		Steps: []Step{
			{At: t0, N: 999_999, Allowed: true, Remaining: 1, ResetAfter: most},
			{At: t0, N: 1, Allowed: true, Remaining: 0, ResetAfter: most, Delay: most},
			{At: t0, N: 1, Remaining: 0, RetryAfter: ms, ResetAfter: most},
			{At: t0, N: 1_000_000, Remaining: 0, RetryAfter: most, ResetAfter: most},
		},
	}}
}
