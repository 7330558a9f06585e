// Package ringlimit is the vocabulary of a distributed rate limiter that lives
// inside the Go services it protects.
//
// Each instance of a service starts a node (package node). The nodes find each
// other by gossip and split the key space with a consistent-hash ring. A node
// decides the keys it owns from in-memory state (package local), forwards
// other keys to their owner, and when an owner cannot be reached asks a
// central Valkey (package remote) behind a circuit breaker that fails open
// (package failover). Every one of these is a Limiter, with the same
// decisions and the same errors, so they stack and swap.
//
// # The model
//
// A caller asks AllowN(ctx, key, rule, n): may n hits on key pass now under
// rule? The answer is a Decision — Allowed, how many hits Remain, when n hits
// could pass (RetryAfter), when the key is back to full capacity
// (ResetAfter), for the leaky bucket how long to wait before acting (Delay),
// and which tier decided (Source). Being limited is a Decision, not an error:
// errors mean bad input (ErrInvalidKey, ErrInvalidRule, ErrInvalidHits), a
// closed limiter (ErrClosed) or a cancelled context.
//
// A denied call consumes nothing. Peek answers for one hit and consumes
// nothing; AllowN with n = 0 is a Peek. n larger than the rule's Capacity
// could never pass and is ErrInvalidHits. State is keyed by (key, index):
// AllowN uses index 0, and MultiLimiter.AllowAll applies rules[i] to index
// i, all or nothing. A call under another algorithm or window than the
// state's starts it afresh (a new Limit or Burst keeps the count), so apply
// several rules to one subject with AllowAll (or one key per rule).
//
// # Algorithms
//
//   - TokenBucket: Burst tokens (Limit when Burst is 0), refilled continuously
//     at Limit per Window; a hit takes a token; bursts pass at once.
//   - LeakyBucket: a queue of Burst that lets one hit out every
//     T = Window/Limit. A call's first hit departs at
//     max(now, previous slot + T), the rest T apart; it is admitted iff the hits still waiting plus n
//     fit in Burst. Delay is its first hit's slot − now: callers who wait it
//     reach the backend at a steady rate.
//   - FixedWindow: Limit hits per window; windows start at multiples of Window
//     since the Unix epoch (so twice Limit can pass across a boundary).
//   - SlidingLog: Limit hits in any interval (now−Window, now], from a log of
//     admitted hits. Exact; memory grows with Limit.
//   - SlidingWindow: the sliding window counter: admitted iff
//     ⌊previous × overlap⌋ + current + n ≤ Limit, overlap = 1 − elapsed/Window.
//
// # Time and exactness
//
// Decisions are made in integer milliseconds: durations in a Decision are
// whole milliseconds, rounded up (a caller who waits RetryAfter is never
// early), and a Window must be a whole number of milliseconds. All state is
// integer, and Rule.Validate admits only rules whose arithmetic stays below
// 2^51, so the Valkey scripts, which compute with Lua doubles (exact below
// 2^53), reach bit-identical decisions: a key can move between its owner and
// the store without changing its answer. The domain covers every Window from
// 1 ms to 24 h with Limit and Burst up to 26 million (see MaxCapacityWindow).
// A clock that goes backwards is clamped to the latest instant a key's state
// has seen: it never refills a bucket or reopens a window.
package ringlimit
