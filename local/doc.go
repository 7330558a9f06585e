// Package local decides rate limits on in-memory state: the five algorithms
// of package ringlimit, exact, allocation-free on existing keys, and fast
// (about 70 ns a decision with the time passed in).
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
// Keys are spread over up to 64 shards by a seeded hash; each shard is a
// bounded LRU map behind its own mutex, so cores do not contend on one lock.
// Config.MaxKeys bounds the keys held: when a shard is full its least
// recently used key is evicted; Stats counts evictions, and separately those
// of keys whose state still mattered (their limits restart early: give the
// limiter room). A key whose state no longer matters — a bucket refilled, a
// window passed, a log emptied — decides exactly as an absent one, and is
// dropped by a sweep that runs on every insert, two slots at a time (no
// goroutine or timer per key).
//
// Memory, measured over 1M keys: about 91 bytes per key held (beyond the key
// string) for the buckets and counters: a 72-byte entry and an 8-byte index
// bucket kept between 3/8 and 3/4 full. The sliding log adds 8 bytes per
// distinct millisecond stamp, at most Limit of them.
package local
