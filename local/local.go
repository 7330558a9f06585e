package local

import (
	"context"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
)

// Config configures a Limiter. The zero Config is valid.
type Config struct {
	// MaxKeys bounds the keys held. When full, a key is evicted to make room:
	// the cheapest of a few sampled keys, where a key whose state no longer
	// matters costs nothing and otherwise the cost is the hits it has used,
	// that is the hits its loss would admit again; a key that denies goes
	// only when every key sampled denies (see the package documentation).
	// If zero, 1<<20.
	MaxKeys int
	// MaxBytes bounds the memory the keys take, as the Go allocator spends
	// it: slots (88 bytes each, allocated 512 at a time and kept), the index
	// (8 bytes a bucket, 3/8 to 3/4 full), the chunks that hold the keys
	// over 16 bytes (each key's bytes and 8 more, in chunks of 8 to 64 KiB
	// counted whole), and a sliding log's 64-byte header and its stamps (in
	// those chunks too). It bounds the heap in use after GC
	// (runtime.MemStats.HeapInuse), not only the live heap: tests hold it
	// within 1.1 × MaxBytes under floods of keys of 16 B to 4 KiB and of
	// sliding logs (docs/memory.md sizes a container by it). It is
	// enforced like MaxKeys, by eviction when a key comes in or a log
	// grows. If zero, 256 MiB.
	MaxBytes int64
	// Clock tells the time. If nil, the system clock (read directly where
	// that is cheaper than time.Now; a Limiter made inside a testing/synctest
	// bubble reads time.Now, and so follows the bubble's clock; one made
	// outside a bubble keeps reading the system clock for its decisions even
	// when called from inside one, while WaitN's timers are the bubble's).
	Clock ringlimit.Clock
}

// Defaults of Config's zero fields.
const (
	DefaultMaxKeys  = memstore.DefaultMaxKeys
	DefaultMaxBytes = memstore.DefaultMaxBytes
)

// Limiter decides on in-memory state. Keys are spread over shards, each a
// bounded map behind its own mutex; idle keys are dropped once their state
// no longer matters, by a sweep that runs on inserts (no goroutine, no timer).
//
// Limiter is safe for simultaneous use by multiple goroutines. It never
// blocks on I/O and ignores its context argument, but for WaitN's.
type Limiter struct{ s *memstore.Limiter }

var (
	_ ringlimit.Limiter      = (*Limiter)(nil)
	_ ringlimit.MultiLimiter = (*Limiter)(nil)
	_ ringlimit.Waiter       = (*Limiter)(nil)
)

// New returns a Limiter configured by c.
func New(c Config) *Limiter {
	return &Limiter{memstore.New(memstore.Config{MaxKeys: c.MaxKeys, MaxBytes: c.MaxBytes, Clock: c.Clock})}
}

// AllowN consumes n hits on key if rule admits them now; n == 0 is a Peek.
// Bad input returns an error wrapping a ringlimit sentinel and records
// nothing. It reads the clock once and is AllowNAt at that instant.
func (l *Limiter) AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	return l.s.AllowN(ctx, key, rule, n)
}

// AllowNAt is AllowN at the instant now instead of the clock's (time is
// passed in, as in x/time/rate's AllowN(t, n)).
func (l *Limiter) AllowNAt(now time.Time, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	return l.s.AllowNAt(now, key, rule, n)
}

// Peek reports what AllowN(ctx, key, rule, 1) would decide, consuming
// nothing. It is shorthand for AllowN(ctx, key, rule, 0).
func (l *Limiter) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return l.s.AllowN(ctx, key, rule, 0)
}

// Reset forgets key.
func (l *Limiter) Reset(ctx context.Context, key string) error { return l.s.Reset(ctx, key) }

// AllowAll applies every rule to key at once, all or nothing (see
// ringlimit.MultiLimiter): rules[i] decides on the key's state at index i,
// and index 0 is the state AllowN uses. All of a key's states live in its
// shard and are decided under the shard's lock in one step. A rule that
// admits while another denies reports what it has left now (nothing was
// consumed). Bad input returns an error wrapping a ringlimit sentinel
// (ErrInvalidRule for no rules or more than ringlimit.MaxRules) and records
// nothing.
func (l *Limiter) AllowAll(ctx context.Context, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	return l.s.AllowAll(ctx, key, rules, n)
}

// AppendAll is AllowAll, appending the decisions to dst and returning the
// extended slice (on an error, dst as it was): with room for them in dst
// it allocates nothing for keys already held, so a caller that keeps a
// buffer (or one on its stack: var buf [ringlimit.MaxRules]ringlimit.Decision)
// decides several limits without garbage.
func (l *Limiter) AppendAll(ctx context.Context, dst []ringlimit.Decision, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	return l.s.AppendAll(ctx, dst, key, rules, n)
}

// AllowAllAt is AllowAll at the instant now instead of the clock's.
func (l *Limiter) AllowAllAt(now time.Time, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	return l.s.AllowAllAt(now, key, rules, n)
}

// Wait is shorthand for WaitN(ctx, key, rule, 1).
func (l *Limiter) Wait(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return l.s.WaitN(ctx, key, rule, 1)
}

// WaitN blocks until n hits on key under rule are admitted (see
// ringlimit.Waiter): it reserves them with ReserveN and sleeps on one
// timer until their time to act. It returns an error at once, consuming
// nothing, for bad input (n above the rule's capacity: ErrInvalidHits) and
// for a wait that would outlast ctx's deadline (ErrWaitTooLong). If ctx
// ends first, a bucket's reservation is given back (CancelAt) and the
// error wraps ctx.Err(). n == 0 waits for nothing and returns a Peek's
// decision.
func (l *Limiter) WaitN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	return l.s.WaitN(ctx, key, rule, n)
}

// Reservation is the answer to ReserveN.
//
// If Decision.Allowed, the hits were consumed and may act at At (now, or
// later for a bucket's reservation); Decision is the key's admitting
// Decision as of At. A caller that will not act gives them back with
// CancelAt. If not, nothing was consumed: the rule's algorithm does not
// reserve ahead (the windows and the log, see ringlimit.Waiter), and At is
// when the key would admit the hits; ask again then.
type Reservation = memstore.Reservation

// ReserveN reserves n hits on key under rule at now, for a caller that
// will wait for them, as x/time/rate's ReserveN does: a key whose rule
// admits them now consumes them as AllowNAt does (At is now); a bucket
// that does not consumes them anyway and At is the instant they fit; a
// window or a log that does not admit them consumes nothing. If by is not
// zero and At is after it, or the bucket's queue reaches no further,
// ReserveN consumes nothing and returns an error wrapping
// ringlimit.ErrWaitTooLong (with At set).
func (l *Limiter) ReserveN(now time.Time, key string, rule ringlimit.Rule, n int64, by time.Time) (Reservation, error) {
	return l.s.ReserveN(now, key, rule, n, by)
}

// CancelAt gives back at now the hits r reserved ahead on a bucket, if
// their time to act has not come: at once if no waiter who still waits
// reserved after r, else once none does (they keep their promised
// instants, and nobody is placed among them), so a bucket nobody waits on
// any longer admits as if the waiters who gave up had never come.
func (l *Limiter) CancelAt(now time.Time, r Reservation) { l.s.CancelAt(now, r) }

// Cancel is CancelAt at the clock's now.
func (l *Limiter) Cancel(r Reservation) { l.s.Cancel(r) }

// Stats are a Limiter's counters.
type Stats = memstore.Stats

// Stats returns the current counters.
func (l *Limiter) Stats() Stats { return l.s.Stats() }
