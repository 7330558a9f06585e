// Package remote is the ringlimit.Limiter that keeps its state in Valkey (or
// Redis 7+): the five algorithms of package local as Lua scripts, one round
// trip and one atomic script per decision. AllowAll runs one script that
// applies every rule, all or nothing (MultiScript): the algorithms' bodies
// as branches of its loop over the rules, so each algorithm has one copy in
// Lua (with one rule, AllowAll runs that rule's own script).
//
// # Contract
//
// A Limiter makes bit for bit the decisions a local.Limiter makes for the
// same calls at the same instants (the differential test holds it to that),
// with Source set to ringlimit.Store. Bad input is refused with the same
// sentinel errors before any command is sent. Being limited is a Decision,
// not an error; errors are the store's (wrapped with the operation, as in
// "remote: eval token_bucket: ...") or, when the caller's context is done,
// the context's own error.
//
// Each decision is one EVALSHA (one EVAL more, once, after the server lost
// its script cache): the script reads the key, decides and, only if hits are
// admitted, writes the new state, all inside the server, so concurrent
// callers on any number of hosts never over-admit. Scripts that may consume
// are run with valkey.NewLuaScript, which valkey-go never retries: a retry
// after a lost reply would charge twice. (valkey-go retries only commands
// marked retryable: NewLuaScriptRetryable does that, NewLuaScript does not;
// the EVALSHA→EVAL fallback happens only on a NOSCRIPT error, when the
// script did not run.) Peeks run the same script through
// NewLuaScriptReadOnly (EVALSHA_RO): it writes nothing, so retrying it is
// safe, and a read-only replica can serve it. Peeks and denied calls write
// nothing; Reset is one small script (a DEL of a value of ours). GiveBack,
// which takes back a charge its caller did not use (a request refused by
// another of its limits), is one script too (scripts/give.lua), the give
// of internal/memstore step for step, and like the consuming ones never
// retried: a retry would give back twice.
//
// Peeks need EVALSHA_RO: Valkey 7.2+ or Redis 7+.
//
// # Time
//
// With a nil Config.Clock the script reads the server's TIME (ms = seconds ×
// 1000 + ⌊µs / 1000⌋), so every client of one server shares one clock. With
// a Clock, the client passes its time in ms. A clock that went backwards is
// clamped to the latest instant the key's state has seen, as in local.
//
// # Keys and representation
//
// Key k lives in the Valkey string Prefix + "{" + k + "}" (hash-tagged, so it
// works on Valkey Cluster). Its value starts with a 9-byte tag, the algorithm
// (1 byte) and the window in ms (int64), followed by int64s, all
// little-endian (see EncodeState):
//
//	TokenBucket, LeakyBucket: level, last update (ms)
//	FixedWindow:              window index, count
//	SlidingWindow:            window index, current count, previous count
//	SlidingLog:               total, head, size, oldest, newest, base, src, moved,
//	                          then (stamp ms, running count) per distinct ms,
//	                          oldest first, then free space
//
// The buckets and windows are read with one GETRANGE of at most 73 bytes
// (so a call under another algorithm never copies a long log found under
// the key; an empty string reads as absent) and written with SET … PX. A
// sliding log (tag byte 131, "format 2") keeps in each entry the hits up to
// it, so no call walks it, whatever its length: a call reads its 73-byte
// header with GETRANGE, finds the first stamp in the window and, if it
// denies, the stamp its RetryAfter waits for, by halving (32 entries in
// one read, then one 16-byte read a step: about 25 reads for a million
// entries), and writes one entry in place with SETRANGE and PEXPIRE. Once
// its pruned prefix outweighs its live entries, they are moved down to the
// header in the value itself, at most 64 KiB a call, never over an entry
// still live (a value of at most 4 MiB with at most 64 KiB of them is
// written afresh instead). So no call holds the server for long: at the
// largest Limit, 1,000,000, with a full log, a denied AllowN(1,000,000),
// a call that prunes 995,000 stamps and each call of the compaction take
// 0.1–0.5 ms of server time (TestSlidingLogNeverBlocks,
// TestSlidingLogCompactionNeverBlocks), where walking the log took 0.2–1 s.
// No call shrinks a value of more than 4 MiB (freeing it would hold the
// server: here a free of up to 4 MiB took at most 17 µs, one of 16 MiB
// 2.5–6.4 ms): its free space takes the next entries, and it goes when its
// TTL ends (or is written over). A value that grows past its allocation is
// reallocated, in 1 MiB steps past 1 MiB (appending 16 bytes at a time to a
// 16 MB string took at most 0.2 ms here, reallocations included). A
// sliding log of the previous release (tag byte 3, "format 1": each
// entry's own count, a 57-byte header) is still read, as that release read
// it, and the first call that admits rewrites it in format 2 (see
// EncodeStateFormat1).
//
// A bucket's level counts in 1/Window-ms of a hit and drains Limit units per
// ms (exactly Limit hits per Window, no rounding). A call under another
// algorithm or another window finds a different tag and starts the key
// afresh; a changed Limit or Burst under the same window keeps the state, as
// in local. EncodeState and DecodeState convert values, so other writers
// (the node's write-behind of local state) can store exactly this format.
//
// # Foreign and corrupt values
//
// Every script checks what it finds under the key before it reads it
// (scripts/value.lua): the type (a hash, list, set or zset fails its
// STRLEN), then the length the value's algorithm has, a sliding log's header
// against the value's length (and its move against its head), and every
// field it reads in [0, 2^53). It reads nothing it has not checked is
// there, and every loop is bounded by the value's length (a format 2 log's
// searches by its logarithm), so any byte string makes it return at once. A value
// of ours under another algorithm or window starts the key afresh, as
// before; anything else is not ours: the script writes nothing and replies
// "bad value", and the Limiter returns an error wrapping ErrBadValue (and
// ringlimit.ErrBadValue). Reset leaves such a key alone too, and
// WriteStates (the node's write-behind and hand-off) never writes over
// another type (its script's SET … GET refuses one); it does replace a
// foreign string, which heals a corrupt state. A corrupt value of ours stays until
// its TTL ends (or someone deletes it); a value that merely looks like
// ours (the right length and ranges) is taken as ours.
//
// # Versions and claims
//
// A key's state carries a Version (the holder's epoch and a counter, and
// the starts it counts), stored beside its states in the Valkey string
// Key(key) + "#v" (VersionKey): 40 bytes, epoch, seq and three origins,
// uint64 little-endian each, epoch and seq below 2^53. WriteStates is
// fenced by it: each key's states are written by one script
// (scripts/write.lua) that reads the stored version and writes them, and
// the new version, only if none is stored or the new (epoch, seq) is above
// the stored one's; a write that is not (an equal one too) writes nothing
// and counts in StaleWrites. So a late write-behind, or a hand-off's write
// that lost a race, never overwrites a newer state. The zero Version is
// "none": it is written only where no version is stored, and stores none,
// so a writer that sets no versions behaves as before. The version lives as
// long as the longest state written with it (and never shortens); the
// decision scripts, AllowAll's and Reset never touch it, so a state the
// store decided on keeps the version it was last written with, and a value
// stored before versions existed reads as having none. (A state the store
// keeps deciding on, on fallback, past its version's TTL has then no
// version either: its next write is written, whatever its version.)
//
// A new owner that finds a key's state at no member loads it with
// ClaimState: one script (scripts/claim.lua) reads the key's claim,
// Key(key) + "#c" (ClaimKey: the member's incarnation, uint64
// little-endian, then its name). Another member's claim stands unless the
// caller's pull cleared that member (Claim.Cleared): then nothing is read
// or written and Loaded.Holder names it, so two members that take one key
// from the store apart do not both start it. Otherwise the script reads
// what LoadState reads and the version, and writes the caller's claim, for
// Claim.TTL; the caller's own claim, of any incarnation, is taken again.
//
// Both keys are under the key's hash tag, as its states, so one script
// reads and writes them all on Valkey Cluster too. Both are read as
// hostile: a version key or claim key of another type, of the wrong
// length, or with an epoch or seq past 2^53 is not ours; WriteStates then
// skips the key (no error, not counted as stale) and ClaimState returns an
// error wrapping ErrBadValue, and neither writes over it.
//
// # Hole records
//
// A bucket waiter's cancel that cannot give its units back yet (waiters
// who still wait reserved after it) records them as a hole in the Valkey
// string Key(key) + "#h" (HoleKey), under the key's hash tag; the holes
// come back once no live reservation lies above them (internal/memstore's
// holes.go says how and why it is exact). Its layout is little-endian
// int64s: the state's epoch, the rule's window (ms) and limit, the
// record's instant (ms), the level then, the deep holes' bottom and units,
// and up to 16 runs of holes (their bottom and top), the highest first,
// all as levels at that instant: 56 bytes and 16 a run. Only the cancel
// script reads or writes it, as a hint: a record of another state or
// rule, of a bad length, or out of range is no record (the holes stay in
// the level until it drains), a foreign string is overwritten and another
// type left alone. It lives as long as the state it was written beside.
//
// # TTLs
//
// Every write sets PX to the time until the state stops mattering — the
// instant from which it decides exactly as an absent key would, which local
// computes too — at least 1 ms. After a call that is the decision's
// ResetAfter (longer only if the clock went backwards). Nothing is left
// without a TTL.
//
// # Valkey Cluster
//
// Every script touches one hash-tagged key (AllowAll's script: the key's
// states at IndexKey(key, i), all under the key's hash tag; WriteStates'
// and ClaimState's scripts a key's states, version and claim, under it
// too), so each decision runs on the master that serves the key's slot,
// and WriteStates' pipeline of one script per key is split by slot by
// valkey-go. Slot returns a key's slot (CRC16 of its hash tag) and
// Shard the address of the master serving it, from the cluster's CLUSTER
// SLOTS map (RefreshShards; a Connector reads it again every ShardRefresh):
// failover keeps one breaker per shard, so one dead master sends only its
// own keys to the fallback.
//
// # The exact domain
//
// Lua numbers are doubles, exact only below 2^53. ringlimit.Rule.Validate
// admits a rule only if max(Limit, Burst) × Window-in-ms ≤ 2^51 (and a
// SlidingLog Window ≤ 2^32−1 ms), and under that bound every value the
// scripts compute stays below 2^52 (a sliding log's running counts are
// kept modulo 2^52: a log holds at most Limit < 2^52 hits, so the
// difference of two is exact). Divisions are exact: the scripts divide
// (a − fmod(a, b)) / b rather than rounding a / b. This covers every Window
// from 1 ms to 24 h with Limit and Burst up to 1,000,000, and up to
// 26,062,497 per 24 h.
//
// # Cost
//
// One round trip per decision. On the server a decision costs about as much
// as a minimal GCRA script (TIME, GET, SET … PX); see BenchmarkDecide. A
// sliding log holds 16 bytes per distinct millisecond (at most Limit of them,
// plus a pruned prefix at most as large and an entry for each call a
// compaction takes, and in a value past 4 MiB the free space a compaction
// left); the other algorithms store 25 or 33 bytes.
//
// # Waiting
//
// WaitN (ringlimit.Waiter) on a bucket is one round trip: reserve_bucket.lua
// consumes the hits, past the capacity if need be, and answers their wait;
// cancel_bucket.lua gives them back, in a second round trip, only if the
// waiter gives up first, and only to the state they were reserved in: a
// bucket's value that a reservation was made in carries that state's epoch
// (33 bytes: tag, level, last update, epoch; the server's clock in µs when
// the first reservation was made in it), which every decision keeps and a
// Reset, an expiry or a change of algorithm or window ends. A cancel that
// names another epoch gives nothing back (StaleCancels counts it). A
// release before this one reads a 33-byte bucket as a value it did not
// write (ErrBadValue) until the state ends: upgrade every node before
// using WaitN on the store. WriteStates writes buckets without their
// epoch (25 bytes). The reservation's reply is checked like a stored value (see
// FuzzParseReserve). A window or a log takes a round trip per try (see
// ringlimit.Waiter). Reserve is the single try, for package failover.
package remote
