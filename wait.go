package ringlimit

import "context"

// Waiter waits for hits instead of refusing them: the answer to "call this
// third-party API at no more than 100/s, from the whole fleet", as
// x/time/rate's Wait is for one process.
//
// The buckets (TokenBucket, LeakyBucket) reserve: a waiter consumes its
// hits at once, even past the bucket's capacity, and learns the instant it
// may act, as x/time/rate's Reserve does; it then sleeps on one timer, and
// callers that do not wait (AllowN) are denied until the waiters ahead of
// them have had their turn. A waiter that gives up before its instant
// gives its hits back: at once if nobody who still waits reserved after
// it, else once nobody does (those behind it keep the instants they were
// promised), so a bucket nobody waits on any longer admits as if the
// waiters who gave up had never come. A key's queue reaches at most 2^51 units of the bucket's level
// past its capacity (at least one Window of hits; for 100 per second,
// centuries).
//
// The windows and the log (FixedWindow, SlidingWindow, SlidingLog) cannot
// hold hits for a future instant without changing what AllowN decides, so
// they do not reserve: a waiter sleeps until the instant the key would
// admit its hits (one timer, from the denial's RetryAfter) and asks again,
// and a caller that took the room first sends it back to sleep. Nothing is
// consumed while it waits, so nothing is given back.
//
// *node.Node, *local.Limiter, *remote.Limiter (and remote's Connector) and
// *failover.Limiter implement Waiter, each with a one-hit shorthand,
// Wait(ctx, key, rule).
type Waiter interface {
	// WaitN blocks until n hits of key under rule can be admitted, consumes them and
	// returns the admitting Decision. It returns an error at once, consuming nothing,
	// if n can never be admitted (more than the rule's capacity: ErrInvalidHits) or if
	// the wait would outlast ctx's deadline; a cancelled ctx ends the wait promptly.
	WaitN(ctx context.Context, key string, rule Rule, n int64) (Decision, error)
}
