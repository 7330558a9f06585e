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
// Each call hashes its key once (Config.Hash, or a seeded maphash). The
// hash's low bits pick one of up to 64 shards, each a map behind its own
// mutex, so cores do not contend on one lock; a limiter gets one shard per
// 1,024 keys its bounds let in, so a small one stays small (measured: with
// MaxKeys 1000, 3 KiB beyond its keys; with the default Config, 64 shards,
// 48 KiB). The index keeps the hash's top 32 bits, so RangeArcs finds the
// keys of stretches of the hash ring by reading 8 bytes a key and the
// entries of those keys alone.
//
// A key whose state no longer matters — a bucket refilled, a window passed,
// a log emptied — decides exactly as an absent one, and is dropped by a sweep
// that runs on every insert, two slots at a time (no goroutine or timer).
//
// # Bounds and eviction
//
// Config.MaxKeys bounds the keys held and Config.MaxBytes the memory they
// hold: key strings, states and sliding-log stamps. When a key comes in (or
// a log grows) past either bound, keys are evicted: each eviction samples
// five keys under a moving hand (as Redis samples) and drops the one whose
// loss admits the fewest extra hits — first a state that no longer matters,
// else the one that has used the fewest hits, estimated from the state alone
// (a bucket's level draining to nothing at its until, a window's counts, a
// log's stamps). A hit writes nothing but its own entry: no recency list.
// An exhausted key therefore outlives any flood of keys hit once. Stats
// counts evictions, and separately those of keys whose state still mattered
// (their limits restart early: give the limiter room).
//
// Memory, measured over 1M keys: 88 bytes per key held beyond the key string
// (a 64-byte entry, one cache line, and an 8-byte index bucket kept between
// 3/8 and 3/4 full), which is what MaxBytes counts per key, plus the key
// string rounded up to its allocation size (16 bytes for a 16-byte key). The
// sliding log adds a 64-byte header and 8 bytes per distinct millisecond
// stamp, at most Limit of them. Under a flood of 4 KiB keys the live heap
// stays within MaxBytes. MaxBytes is per shard (MaxBytes / shards), and so is
// MaxKeys: a shard may fill a little before the limiter does. A single
// sliding log may exceed its shard's share by itself, up to its Limit of
// stamps.
package local
