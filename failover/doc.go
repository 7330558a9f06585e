// Package failover keeps a store outage from taking the service down.
//
// A Limiter wraps a primary ringlimit.Limiter (in ringlimit, the central
// Valkey store) with a per-call timeout and a circuit breaker. Each call to the
// primary is bounded by Config.Timeout (50 ms by default), whatever the
// caller's own deadline; the caller's deadline, if sooner, always wins.
//
// Slow is not dead. With Config.Lag (the node always gives one) the timeout
// is a ceiling: each shard's effective timeout follows the latencies it has
// shown, as TCP's retransmission timer does (RFC 6298, see RTO): SRTT +
// 4·RTTVAR, at least Config.Floor (50 ms) plus the lag this process's own
// timers show lately (the longest lateness of the last 5 s: how long it is
// descheduled at a stretch by a CPU quota or a busy host), doubled after each
// timeout until the next answer. Time this process spent descheduled during a
// call does not count against the primary (Lag.Extend: Lifeguard's local
// health): the call waits that much longer, at most StallCredit (its timeout, 100 ms at
// least) more.
//
// The breaker opens on evidence of failure, not on slowness: after
// Config.MaxFailures (5) consecutive errors (a refused or reset connection,
// an error answer), or after a run of at least MaxFailures timeouts and
// errors with no answer between that spans at least Config.MinSpan (500 ms).
// Slow answers are answers: they end the run. While open, calls no longer
// touch the primary and are answered by Config.Policy in well under a
// microsecond, without allocating. After Config.Cooldown (1 s) one probe
// call goes to the primary; its success closes the breaker, its failure or
// timeout keeps it open for another cooldown.
//
// When the primary cannot answer, the Decision comes from the policy, with
// Source ringlimit.Fallback and no error:
//
//   - Open (the default) allows the call;
//   - Closed denies it, with a RetryAfter of the cooldown;
//   - LocalShare decides on a local limiter with this node's share of the
//     rule (the rule divided by Config.Share(), for example the number of
//     live nodes), so the cluster still enforces about the whole limit.
//
// Only the primary's own failures count against the breaker. A caller whose
// context is done gets its ctx.Err() back; bad input and ringlimit.ErrClosed
// are returned as the primary returns them; none of these counts.
//
// With Config.Shard (for a Valkey Cluster, remote.Limiter.Shard: the master
// that serves a key's slot) the Limiter keeps one breaker per shard, so a
// failed master sends only its own keys to the policy while the others are
// still decided by the store. Stats then aggregates them and lists each
// shard's breaker in Stats.Shards.
//
// The breaker is also offered on its own, as Breaker, for callers (the node's
// peer connections) that protect something other than a Limiter. This package
// is the only one in ringlimit that imports sony/gobreaker; none of its types
// appear in the API.
//
// The primary must return when its context is done: the Limiter bounds the
// wait by the context it passes and starts no goroutines of its own. It must
// also report a store it cannot reach as an ordinary error, not as one
// wrapping a ringlimit sentinel (those are returned to the caller as-is).
//
// Cost, measured on a 2-core machine: a decision with the breaker open takes
// about 0.1 µs (0.2 µs with LocalShare) and allocates nothing; a healthy call
// pays about 0.7 µs and 5 small allocations for the timeout context and the
// breaker's bookkeeping, against some 50 µs for a Valkey round trip.
//
// WaitN (ringlimit.Waiter) asks a primary that is a Reserver for each
// reservation through the breaker, under the call timeout, and sleeps the
// wait itself; a deadline refusal or a cancelled ctx is the caller's and
// passes through as an error, uncounted; when the primary cannot answer,
// the policy decides (see WaitN).
package failover
