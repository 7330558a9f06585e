// Package local decides rate limits on in-memory state: the five algorithms
// of package ringlimit, exact, allocation-free on existing keys, and fast.
//
// # Algorithms
//
// Each algorithm is a pure function of a key's small state, the rule, the
// time in integer milliseconds and the hits asked for; it writes the state
// only when hits are admitted. The semantics are ringlimit's (see its
// package documentation); package remote runs the same arithmetic in Valkey
// and gives bit-identical decisions.
//
// # Keys
//
// Each call hashes its key once (a seeded maphash; node's store hashes with
// the ring's hash instead, so that a ring change finds the keys it moves). The
// hash's low bits pick one of up to 64 shards, each a map behind its own
// mutex, so cores do not contend on one lock; a limiter gets one shard per
// 1,024 keys its bounds let in, so a small one stays small (measured: with
// MaxKeys 1000, 1.3 KiB beyond what Stats.Bytes counts; with the default
// Config, 64 shards, 68 KiB). The index keeps the hash's top 32 bits, so a
// walk over stretches of the hash (node's, after a ring change) reads 8
// bytes a key and the entries of the keys it finds alone.
//
// A key whose state no longer matters — a bucket refilled, a window passed,
// a log emptied — decides exactly as an absent one, and is dropped by a sweep
// that runs on every insert, two slots at a time (no goroutine or timer).
//
// # Bounds and eviction
//
// Config.MaxKeys bounds the keys held and Config.MaxBytes the memory they
// take. When a key comes in (or a log grows) past either bound, keys are
// evicted: each eviction samples five keys under a moving hand (as Redis
// samples) and drops the one whose loss admits the fewest extra hits —
// first a state that no longer matters, then one that still admits a hit,
// the one that has used the fewest hits, estimated from the state alone (a
// bucket's level draining to nothing at its until, a window's counts, a
// log's stamps), and last a state that denies: one whose next hit would be
// denied now. A hit writes nothing but its own entry: no recency list. A
// decision that leaves a key nothing remaining records until when it
// denies (a peek's RetryAfter), exactly, in 8 bytes beside its entry; a
// state that came in from another node counts as denying from its first decision
// here, and one that was exhausted under a rule whose Limit then rose
// counts as denying until it would have admitted under the old one.
//
// So a key that denies outlives any flood of keys that still admit, however
// much each of them spent. It goes only when every key sampled denies: the
// limiter is then full of exhausted keys, and the loss is this: one of them
// restarts while it should deny. Its shard then takes the newest of its last
// four inserts that denies, so a flood of keys exhausted in turn replaces
// its own newest keys before it reaches the keys that were there before it;
// a key that came in during such a flood, and was exhausted, may restart
// early. Stats counts evictions, those of keys whose state still mattered
// (their limits restart early), and of those, the keys that denied: give
// the limiter room if they are not zero. A leaky bucket denies only while
// its queue is full, until its first waiting hit starts to leave.
//
// Memory: MaxBytes counts what the Go allocator spends (see memory.go):
// slots of 88 bytes (a 64-byte entry, one cache line; a 16-byte key area;
// the deny instant), allocated 512 at a time (a shard's first page grows
// from 8) and kept once allocated; the index, 8-byte buckets kept between
// 3/8 and 3/4 full; the key arena, chunks of 8 to 64 KiB that hold each
// key over 16 bytes and an 8-byte header, compacted when an eighth of one
// is records that went, and counted whole; a sliding log's 64-byte header,
// in pages of 127 kept once allocated, and its ring, 8 bytes per distinct
// millisecond stamp (at most Limit of them), in the key arena. Measured
// over 1M keys: 89.6 bytes a key beyond the key string. Every chunk and
// page is a size that has its span to itself, and no key or log has a
// heap object of its own, so what MaxBytes counts is the heap in use after
// GC (HeapInuse, what a container's limit pays), not only the live heap:
// under floods of keys of 16 B to 4 KiB, of mixed lengths, of 4 KiB keys
// after small ones, and of sliding logs, measured at 0.83 to 1.06 ×
// MaxBytes with MaxBytes 8 MiB, and Stats.Bytes is the live heap to within
// 1 % of MaxBytes; tests hold the heap in use within 1.1 × (a heap object
// per key or log left it at 1.2 to 2.6 ×). See docs/memory.md for sizing a
// container. Not counted: in node's store, the list of slots changed since
// the last write-behind (4 bytes each). MaxBytes is per shard (MaxBytes / shards), and so is
// MaxKeys: a shard may fill a little before the limiter does, and one with
// a small share (under a few pages) holds fewer keys than its share would
// fit, since it allocates slots a page at a time. A single sliding log may
// exceed its shard's share by itself, up to its Limit of stamps.
//
// # Waiting
//
// WaitN (ringlimit.Waiter) reserves with ReserveN and sleeps on one timer.
// A bucket's reservation consumes the hits at once, taking its level past
// the capacity if need be (by at most 2^51 units, so every decision's
// arithmetic stays exact), and AllowN denies while the level is over it; a
// waiter that gives up returns the hits with CancelAt, less those later
// reservations were promised. A window or a log reserves nothing: its
// waiter sleeps until the denial's RetryAfter and asks again. A bucket
// past its capacity reports nothing Remaining.
package local
