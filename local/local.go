package local

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/ringlimit/ringlimit"
)

// Config configures a Limiter. The zero Config is valid.
type Config struct {
	// MaxKeys bounds the keys held. When full, the least recently used key is
	// evicted (counted in Stats; if its state still mattered, its limit
	// restarts early). If zero, 1<<20.
	MaxKeys int
	// Clock tells the time. If nil, the system clock.
	Clock ringlimit.Clock
	// TrackChanges records which keys admitted calls change, for Drain
	// (node's write-behind). If false, Drain finds nothing and AllowN pays
	// nothing for it.
	TrackChanges bool
}

// Limiter decides on in-memory state. Keys are spread over shards, each a
// bounded LRU map behind its own mutex; idle keys are dropped once their state
// no longer matters, by a sweep that runs on inserts (no goroutine, no timer).
//
// Limiter is safe for simultaneous use by multiple goroutines. It never
// blocks on I/O and ignores its context argument.
type Limiter struct {
	clock  ringlimit.Clock
	seed   maphash.Seed
	mask   uint64
	shards []shard
}

var _ ringlimit.Limiter = (*Limiter)(nil)

// New returns a Limiter configured by c.
func New(c Config) *Limiter {
	maxKeys := c.MaxKeys
	if maxKeys <= 0 {
		maxKeys = 1 << 20
	}
	// One shard per 4096 keys, up to 64: small limiters get an exact LRU,
	// large ones no lock contention to speak of.
	n := 1
	for n < 64 && n*2*4096 <= maxKeys {
		n *= 2
	}
	l := &Limiter{clock: c.Clock, seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard, n)}
	for i := range l.shards {
		per := maxKeys / n
		if i < maxKeys%n {
			per++
		}
		l.shards[i].init(int32(per), l.seed)
		l.shards[i].track = c.TrackChanges
	}
	return l
}

// now reads the clock: once per call, in ms.
func (l *Limiter) now() int64 {
	if l.clock == nil {
		return time.Now().UnixMilli()
	}
	return l.clock.Now().UnixMilli()
}

func (l *Limiter) shard(key string) *shard {
	return &l.shards[maphash.String(l.seed, key)&l.mask]
}

// AllowN consumes n hits on key if rule admits them now; n == 0 is a Peek.
// Bad input returns an error wrapping a ringlimit sentinel and records
// nothing. It reads the clock once and is AllowNAt at that instant.
func (l *Limiter) AllowN(_ context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if err := ringlimit.ValidateCall(key, rule, n); err != nil {
		return ringlimit.Decision{}, err
	}
	d, _ := l.decide(l.now(), key, rule, n, false)
	return d, nil
}

// AllowNAt is AllowN at the instant now instead of the clock's (time is
// passed in, as in x/time/rate's AllowN(t, n)).
func (l *Limiter) AllowNAt(now time.Time, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if err := ringlimit.ValidateCall(key, rule, n); err != nil {
		return ringlimit.Decision{}, err
	}
	d, _ := l.decide(now.UnixMilli(), key, rule, n, false)
	return d, nil
}

// AllowNHeldAt is AllowNAt for a key that holds a state that still matters
// (see Has); for any other key it decides and records nothing and returns
// false. A node uses it while a key's state may still be on its way from
// another member: one lookup tells both whether the state is here and the
// decision.
func (l *Limiter) AllowNHeldAt(now time.Time, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, bool, error) {
	if err := ringlimit.ValidateCall(key, rule, n); err != nil {
		return ringlimit.Decision{}, false, err
	}
	d, held := l.decide(now.UnixMilli(), key, rule, n, true)
	return d, held, nil
}

func (l *Limiter) decide(now int64, key string, rule ringlimit.Rule, n int64, held bool) (ringlimit.Decision, bool) {
	h := maphash.String(l.seed, key)
	s := &l.shards[h&l.mask]
	if n == 0 {
		return s.apply(key, uint32(h>>32), rule.Algorithm, paramsOf(rule), now, 1, false, held)
	}
	return s.apply(key, uint32(h>>32), rule.Algorithm, paramsOf(rule), now, n, true, held)
}

// Peek reports whether one hit on key would be admitted now, and consumes
// nothing: Allowed, RetryAfter and Delay are for one hit; Remaining and
// ResetAfter describe the key as it stands.
func (l *Limiter) Peek(_ context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return l.AllowN(context.Background(), key, rule, 0)
}

// Reset forgets key.
func (l *Limiter) Reset(_ context.Context, key string) error {
	if err := ringlimit.ValidateKey(key); err != nil {
		return err
	}
	l.shard(key).reset(key)
	return nil
}

// Stats are a Limiter's counters.
type Stats struct {
	Keys        int    // keys held now
	Evicted     uint64 // keys dropped to make room because MaxKeys was reached
	EvictedLive uint64 // of those, keys whose state still mattered: their limits restarted early
	Expired     uint64 // idle keys dropped because their state no longer mattered
}

// Stats returns the current counters.
func (l *Limiter) Stats() Stats {
	var st Stats
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		st.Keys += s.nkeys
		st.Evicted += s.evicted
		st.EvictedLive += s.evictedLive
		st.Expired += s.expired
		s.mu.Unlock()
	}
	return st
}
