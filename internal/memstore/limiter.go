package memstore

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/wallclock"
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
	// TrackChanges records which keys admitted calls change, for Drain
	// (node's write-behind). If false, Drain finds nothing and AllowN pays
	// nothing for it.
	TrackChanges bool
	// Hash places keys: the Limiter hashes each key once per call with it,
	// picks the key's shard by the low bits and keeps the top 32 bits in its
	// index, so RangeArcs finds the keys whose hash falls in given arcs by
	// reading 8 bytes a key. Give it the hash of the ring the keys are spread
	// by (node gives xxhash's Sum64String). It must be a good 64-bit hash,
	// pure and safe for simultaneous use; keys that share their top 32 bits
	// probe longer. If nil, a randomly seeded maphash (RangeArcs then works
	// in its space, which means little to a caller).
	Hash func(key string) uint64
}

// Defaults of Config's zero fields.
const (
	DefaultMaxKeys  = 1 << 20
	DefaultMaxBytes = 256 << 20
)

// Limiter decides on in-memory state. Keys are spread over shards, each a
// bounded map behind its own mutex; idle keys are dropped once their state
// no longer matters, by a sweep that runs on inserts (no goroutine, no timer).
//
// Limiter is safe for simultaneous use by multiple goroutines. It never
// blocks on I/O and ignores its context argument.
type Limiter struct {
	clock  ringlimit.Clock
	direct bool                // no clock given, and the system clock read directly (wallclock.Direct when made)
	hash   func(string) uint64 // Config.Hash; nil: maphash with seed
	seed   maphash.Seed
	mask   uint64 // len(shards) − 1: a key's shard is the low bits of its hash mixed with mix
	mix    uint64 // random, odd: a client cannot aim its keys at one shard
	shards []shard
	hooks  *testHooks // nil but in the package's own tests

	// epochs gives a bucket's state its epoch (see newEpoch); stale counts
	// the cancels and give-backs dropped because their state was not the
	// one they came from.
	epochs atomic.Uint64
	stale  atomic.Uint64
	// queues spreads the window waiters' asks (see windowQueues).
	queues windowQueues
}

// testHooks let the package's tests hold AllowAll's fast path (inPlace) to
// its general path: general makes AllowAll skip the fast path, and inPlace
// counts the calls it decided (the tests that set them call serially).
type testHooks struct {
	general bool
	inPlace int
}

func (h *testHooks) skipFast() bool { return h != nil && h.general }

func (h *testHooks) decidedFast() {
	if h != nil {
		h.inPlace++
	}
}

var _ ringlimit.Limiter = (*Limiter)(nil)

// keysPerShard is about how many keys a shard holds before the Limiter gets
// another: small limiters stay small (a shard costs about 800 bytes before
// its first key), large ones see no lock contention to speak of.
const keysPerShard = 1024

// New returns a Limiter configured by c.
func New(c Config) *Limiter {
	maxKeys, maxBytes := c.MaxKeys, c.MaxBytes
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	// The keys the bounds let in, at the smallest a key can be.
	fits := min(int64(maxKeys), maxBytes/(slotBytes+inlineKey))
	k := uint(0)
	for k < 6 && int64(keysPerShard)<<(k+1) <= fits {
		k++
	}
	n := 1 << k
	l := &Limiter{clock: c.Clock, direct: c.Clock == nil && wallclock.Direct(), hash: c.Hash, seed: maphash.MakeSeed(), mask: uint64(n - 1), mix: rand.Uint64() | 1, shards: make([]shard, n)}
	l.epochs.Store(rand.Uint64())
	for i := range l.shards {
		per := maxKeys / n
		if i < maxKeys%n {
			per++
		}
		l.shards[i].init(int32(per), maxBytes/int64(n), l)
		l.shards[i].track = c.TrackChanges
	}
	return l
}

// now reads the clock: once per call, in ms.
func (l *Limiter) now() int64 {
	if l.clock != nil {
		return l.clock.Now().UnixMilli()
	}
	if l.direct {
		return wallclock.Millis() // one clock read, where time.Now makes two
	}
	return time.Now().UnixMilli()
}

// hashOf is key's 64-bit hash: Config.Hash, or the seeded maphash.
func (l *Limiter) hashOf(key string) uint64 {
	if l.hash != nil {
		return l.hash(key)
	}
	return maphash.String(l.seed, key)
}

// locate hashes key once: its shard is the low bits of the hash's low half
// times a random odd number (which the top bits of the product hide from a
// client choosing keys to crowd one shard), and its top 32
// bits are its fragment, which orders it in the shard's index. (Every shard
// then holds keys from all round the ring, evenly, however the ring places
// this node's arcs.)
func (l *Limiter) locate(key string) (*shard, uint32) {
	return l.place(l.hashOf(key))
}

// place is locate for a key whose hash is h.
func (l *Limiter) place(h uint64) (*shard, uint32) {
	return &l.shards[(h*l.mix)>>32&l.mask], uint32(h >> 32)
}

// AllowN consumes n hits on key if rule admits them now; n == 0 is a Peek.
// Bad input returns an error wrapping a ringlimit sentinel and records
// nothing. It reads the clock once and is AllowNAt at that instant.
func (l *Limiter) AllowN(_ context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if uint(len(key)-1) >= ringlimit.MaxKeyLen { // empty (wraps round) or too long
		return ringlimit.Decision{}, ringlimit.ValidateKey(key)
	}
	s, frag := l.locate(key)
	var d ringlimit.Decision
	_, err := s.apply(&d, key, frag, rule, l.now(), n, false, Gate{})
	return d, err
}

// AllowNAt is AllowN at the instant now instead of the clock's (time is
// passed in, as in x/time/rate's AllowN(t, n)).
func (l *Limiter) AllowNAt(now time.Time, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if uint(len(key)-1) >= ringlimit.MaxKeyLen {
		return ringlimit.Decision{}, ringlimit.ValidateKey(key)
	}
	s, frag := l.locate(key)
	var d ringlimit.Decision
	_, err := s.apply(&d, key, frag, rule, now.UnixMilli(), n, false, Gate{})
	return d, err
}

// AllowNHeldAt is AllowNAt for a key that holds a state that still matters
// (see Has); for any other key it decides and records nothing and returns
// false. A node uses it while a key's state may still be on its way from
// another member: one lookup tells both whether the state is here and the
// decision.
func (l *Limiter) AllowNHeldAt(now time.Time, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, bool, error) {
	if uint(len(key)-1) >= ringlimit.MaxKeyLen {
		return ringlimit.Decision{}, false, ringlimit.ValidateKey(key)
	}
	s, frag := l.locate(key)
	var d ringlimit.Decision
	held, err := s.apply(&d, key, frag, rule, now.UnixMilli(), n, true, Gate{})
	return d, held, err
}

// Gate says whether a key that holds no state that still matters may be
// started (AllowNIfAt): it may if Fresh(Tok) reports true, called under
// the key's lock. The zero Gate starts nothing.
//
// Tok is the caller's snapshot of what made it think the key is its to
// start (a node: the generation of the ring view it routed the call by),
// so that Fresh can tell a snapshot that went stale before the lock was
// taken.
type Gate struct {
	Fresh func(tok uint64) bool
	Tok   uint64
}

func (g Gate) open() bool { return g.Fresh != nil && g.Fresh(g.Tok) }

// AllowNIfAt is AllowNAt, writing the decision to *d (a caller on a hot
// path saves copying it), for a key whose Config.Hash is h (a caller that
// hashed the key already saves hashing it again; without a Config.Hash, h
// is ignored and the key hashed), that decides a key that holds no state
// that still matters only if the gate opens, asked under the key's lock.
// Else it decides and records nothing and returns false (and nil).
//
// A node decides this way while a key's state may be on its way from
// another member or leaving for one: a state that is here is decided on
// at once, and a hand-over that takes states out (Take, under the same
// lock) shuts the gate first, so no decision it does not know of starts a
// key afresh after the key's state left.
func (l *Limiter) AllowNIfAt(d *ringlimit.Decision, now time.Time, key string, h uint64, rule ringlimit.Rule, n int64, gate Gate) (bool, error) {
	if uint(len(key)-1) >= ringlimit.MaxKeyLen {
		return false, ringlimit.ValidateKey(key)
	}
	if l.hash == nil {
		h = l.hashOf(key)
	}
	s, frag := l.place(h)
	return s.apply(d, key, frag, rule, now.UnixMilli(), n, true, gate)
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
	s, frag := l.locate(key)
	s.reset(key, frag)
	l.queues.forget(key)
	return nil
}

// Stats are a Limiter's counters.
type Stats struct {
	Keys        int    // keys held now
	Bytes       int64  // memory the keys take, slots and index included, as MaxBytes counts it (0 when empty)
	Evicted     uint64 // keys dropped to make room because MaxKeys or MaxBytes was reached
	EvictedLive uint64 // of those, keys whose state still mattered: their limits restarted early
	// EvictedDenying counts, of EvictedLive, keys that were denying (their
	// state would deny a hit then) when they went: every key sampled denied,
	// so the limiter was full of exhausted keys, and these restarted while
	// exhausted. Give the limiter room if it is not zero.
	EvictedDenying uint64
	Expired        uint64 // idle keys dropped because their state no longer mattered
	// StaleCancels counts the give-backs dropped because the key's state
	// was no longer the one they came from: a waiter's cancel (CancelAt,
	// CancelTicket) after a Reset, an eviction, an expiry or a change of
	// algorithm started the key afresh.
	StaleCancels uint64
}

// Stats returns the current counters.
func (l *Limiter) Stats() Stats {
	var st Stats
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		st.Keys += s.nkeys
		st.Bytes += s.bytes
		st.Evicted += s.evicted
		st.EvictedLive += s.evictedLive
		st.EvictedDenying += s.evictedDenying
		st.Expired += s.expired
		s.mu.Unlock()
	}
	st.StaleCancels = l.stale.Load()
	return st
}
