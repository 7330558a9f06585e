package ringlimit

import (
	"context"
	"math"
	"strconv"
	"time"
)

// Limiter decides whether hits on a key are within a Rule.
//
// Every implementation (local, remote, failover, node) returns the same
// decisions for the same inputs and the same sentinel errors for bad input, so
// they stack and swap. Implementations are safe for simultaneous use by
// multiple goroutines.
type Limiter interface {
	// AllowN consumes n hits on key if the rule admits them now. A denied call
	// consumes nothing. n == 0 is a Peek.
	AllowN(ctx context.Context, key string, rule Rule, n int64) (Decision, error)
	// Peek reports what AllowN(ctx, key, rule, 1) would decide, and consumes
	// nothing.
	Peek(ctx context.Context, key string, rule Rule) (Decision, error)
	// Reset forgets every hit recorded on key.
	Reset(ctx context.Context, key string) error
}

// Clock tells the time. A nil Clock in a Config means the system clock.
type Clock interface{ Now() time.Time }

// Source says which tier made a Decision.
type Source uint8

const (
	Local    Source = iota // this node's in-memory state: it owns the key
	Peer                   // the owning peer, over the peer connection
	Store                  // the central store (Valkey)
	Fallback               // neither could answer: the fail-open policy
)

var sourceNames = [...]string{"local", "peer", "store", "fallback"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "Source(" + strconv.Itoa(int(s)) + ")"
}

// Decision is the answer to one call. Being limited is a Decision with
// Allowed false, not an error.
//
// All durations are whole milliseconds, rounded up: ringlimit keeps time in
// milliseconds (see Rule). A duration too long for a time.Duration (about
// 292 years) is MaxDuration, in every tier: rules at the edge of the exact
// domain reach it (Limit 1, Burst 1,000,000, Window 24 h has a ResetAfter of
// about 2,700 years).
type Decision struct {
	Allowed    bool
	Limit      int64         // the rule's Limit
	Remaining  int64         // hits still allowed now, never negative
	RetryAfter time.Duration // zero when Allowed; else how long until the same n hits could pass
	ResetAfter time.Duration // until the key is back to full capacity
	Delay      time.Duration // LeakyBucket only: wait this long before acting (steady outflow)
	Source     Source        // who decided
}

// MaxDuration is the largest time.Duration: a Decision duration that would
// be longer saturates to it.
const MaxDuration = time.Duration(math.MaxInt64)

// Millis returns ms milliseconds as a Duration, saturated to ±MaxDuration
// instead of overflowing. Every Limiter builds its Decision durations with
// it, so they saturate identically.
func Millis(ms int64) time.Duration {
	const most = int64(MaxDuration / time.Millisecond)
	switch {
	case ms > most:
		return MaxDuration
	case ms < -most:
		return -MaxDuration
	}
	return time.Duration(ms) * time.Millisecond
}
