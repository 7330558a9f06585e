package remote

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/ringlimit/ringlimit"
)

// State is one key's state as the scripts store it (see ringlimit.State):
// the value of the key's Valkey string. EncodeState and DecodeState convert
// it, so a writer that holds the state elsewhere (the node's write-behind of
// local state) can store exactly what the scripts would have. The value
// carries no Until: the key's TTL does.
type State = ringlimit.State

// LogEntry is Count hits admitted at the same millisecond Stamp.
type LogEntry = ringlimit.LogEntry

// tagLen is the length of the tag that starts every value: the algorithm
// (1 byte) and the window in ms (int64, little-endian).
const tagLen = 9

// tag is the prefix of every value recorded under alg and window w.
func tag(alg ringlimit.Algorithm, w int64) string {
	var b [tagLen]byte
	b[0] = byte(alg)
	binary.LittleEndian.PutUint64(b[1:], uint64(w))
	return string(b[:])
}

// ruleArg is a script's first argument: the tag, then the limit and the
// capacity (Burst, or Limit when Burst is zero).
func ruleArg(r ringlimit.Rule) string {
	var b [ruleLen]byte
	return string(appendRule(b[:0], r))
}

// ruleLen is the length of a rule's argument.
const ruleLen = tagLen + 16

// appendRule appends r's argument (see ruleArg) to b.
func appendRule(b []byte, r ringlimit.Rule) []byte {
	b = append(b, byte(r.Algorithm))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.WindowMillis()))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Limit))
	return binary.LittleEndian.AppendUint64(b, uint64(r.Capacity()))
}

// ErrBadState: DecodeState was given a value the scripts did not write.
var ErrBadState = errors.New("remote: bad state")

// EncodeState returns the value the scripts store for s. All integers are
// int64, little-endian:
//
//	tag:            algorithm (1 byte), window ms (8)
//	buckets:        tag, A (level), B (last update ms), and C (the state's
//	                epoch, see internal/memstore/wait.go) if it is not 0
//	FixedWindow:    tag, A (window index), B (count)
//	SlidingWindow:  tag, A (window index), B (current), C (previous)
//	SlidingLog:     tag (its first byte 131: format 2), total, head, size,
//	                oldest, newest, base, src, moved (a 73-byte header),
//	                then Stamp, running count per entry, then free space
//
// In a sliding log value, an entry's running count is the hits of the
// entries up to it, itself included, counted from base (the running count
// just before the entry at head), modulo 2^52; so a script finds the k-th
// hit by halving, without walking the log. total is the sum of the live
// entries' counts, the live entries run from byte offset head to size (at
// most the value's length: the bytes after size are free), oldest and
// newest are the first and last live stamps. Entries before head were
// pruned; src and moved, when not 0, say that a compaction has copied the
// entries from src to moved down to the header. EncodeState writes no
// pruned entry and no free space (head = 73, size = the length), base 0,
// src and moved 0.
//
// Store the value with a TTL of (the instant the state stops mattering −
// now), at least 1 ms, as the scripts do.
func EncodeState(s State) []byte {
	b := []byte(tag(s.Algorithm, s.Window))
	le := binary.LittleEndian
	put := func(v int64) { b = le.AppendUint64(b, uint64(v)) }
	switch s.Algorithm {
	case ringlimit.SlidingWindow:
		put(s.A)
		put(s.B)
		put(s.C)
	case ringlimit.SlidingLog:
		b[0] = logFormat2
		var total, oldest, newest int64
		for _, e := range s.Log {
			total += e.Count
		}
		if len(s.Log) > 0 {
			oldest, newest = s.Log[0].Stamp, s.Log[len(s.Log)-1].Stamp
		}
		b = slices.Grow(b, 8*8+16*len(s.Log))
		put(total)
		put(logHeaderLen)
		put(int64(logHeaderLen + 16*len(s.Log)))
		put(oldest)
		put(newest)
		put(0) // base
		put(0) // src
		put(0) // moved
		var run int64
		for _, e := range s.Log {
			run = (run + e.Count) % logModulus
			put(e.Stamp)
			put(run)
		}
	case ringlimit.TokenBucket, ringlimit.LeakyBucket:
		put(s.A)
		put(s.B)
		if s.C != 0 {
			put(s.C)
		}
	default:
		put(s.A)
		put(s.B)
	}
	return b
}

// EncodeStateFormat1 is EncodeState, but for a sliding log the previous
// release's value (format 1: a 57-byte header total, head, size, oldest,
// newest, newest's count, then Stamp, Count per entry), which that
// release's DecodeState and scripts read. It is for states sent where that
// release may still read them (a node's hand-off to a peer during a rolling
// upgrade); DecodeState and the scripts read it too, and the scripts
// rewrite it in format 2 when they next admit hits.
//
// A bucket's epoch (C) is left out, as that release knows none: a state
// sent to a peer or written behind starts there without one, so a cancel
// from before gives nothing back to it (a cancel goes to the member that
// reserved, which no longer holds the state anyway).
func EncodeStateFormat1(s State) []byte {
	if s.Algorithm == ringlimit.TokenBucket || s.Algorithm == ringlimit.LeakyBucket {
		s.C = 0
	}
	if s.Algorithm != ringlimit.SlidingLog {
		return EncodeState(s)
	}
	le := binary.LittleEndian
	b := make([]byte, 0, logHeader1Len+16*len(s.Log))
	b = append(b, tag(s.Algorithm, s.Window)...)
	var total, oldest, newest, ncount int64
	for _, e := range s.Log {
		total += e.Count
	}
	if n := len(s.Log); n > 0 {
		oldest, newest, ncount = s.Log[0].Stamp, s.Log[n-1].Stamp, s.Log[n-1].Count
	}
	for _, v := range [...]int64{total, logHeader1Len, int64(logHeader1Len + 16*len(s.Log)), oldest, newest, ncount} {
		b = le.AppendUint64(b, uint64(v))
	}
	for _, e := range s.Log {
		b = le.AppendUint64(le.AppendUint64(b, uint64(e.Stamp)), uint64(e.Count))
	}
	return b
}

const (
	// logFormat2 is the first byte of a sliding log value in format 2
	// (running counts); format 1 (each entry's own count, the previous
	// release's) starts with the algorithm's byte, 3, and is still read.
	logFormat2 = 131
	// logHeaderLen is the length of a format 2 sliding log's header, and
	// logHeader1Len of a format 1 one's.
	logHeaderLen  = tagLen + 8*8
	logHeader1Len = tagLen + 6*8
	// logModulus: running counts are kept modulo 2^52. A log holds at most
	// Limit < 2^52 hits, so the difference of two, modulo 2^52, is exact.
	logModulus = 1 << 52
)

// DecodeState parses a value the scripts stored, a sliding log in either
// format. It refuses what the scripts refuse as not theirs (see
// ErrBadValue): a value of the wrong length for its algorithm, a sliding
// log header that disagrees with the value, and any field outside [0, 2^53)
// (a window or a log entry's count below 1). Its errors wrap ErrBadState.
func DecodeState(v []byte) (State, error) {
	if len(v) < tagLen || v[0] >= byte(len(scriptFiles)) && v[0] != logFormat2 {
		return State{}, fmt.Errorf("%w: %d bytes", ErrBadState, len(v))
	}
	le := binary.LittleEndian
	s := State{Algorithm: ringlimit.Algorithm(v[0]), Window: int64(le.Uint64(v[1:]))}
	if s.Window < 1 || !inRange(s.Window) {
		return State{}, fmt.Errorf("%w: window %d", ErrBadState, s.Window)
	}
	body := v[tagLen:]
	word := func(i int) int64 { return int64(le.Uint64(body[8*i:])) }
	want := 16
	switch s.Algorithm {
	case ringlimit.SlidingWindow:
		want = 24
	case ringlimit.TokenBucket, ringlimit.LeakyBucket:
		if len(body) == 24 { // with its epoch
			want = 24
		}
	case logFormat2:
		s.Algorithm = ringlimit.SlidingLog
		return decodeLog(s, v)
	case ringlimit.SlidingLog:
		return decodeLog1(s, v)
	}
	if len(body) != want {
		return State{}, fmt.Errorf("%w: %s body of %d bytes", ErrBadState, s.Algorithm, len(body))
	}
	s.A, s.B = word(0), word(1)
	if want == 24 {
		s.C = word(2)
	}
	if want == 24 && s.Algorithm != ringlimit.SlidingWindow && s.C == 0 {
		return State{}, fmt.Errorf("%w: %s with an epoch of 0", ErrBadState, s.Algorithm) // (the scripts write none then)
	}
	if !inRange(s.A, s.B, s.C) {
		return State{}, fmt.Errorf("%w: %s fields %d, %d, %d out of range", ErrBadState, s.Algorithm, s.A, s.B, s.C)
	}
	return s, nil
}

// decodeLog parses a format 2 sliding log.
func decodeLog(s State, v []byte) (State, error) {
	if len(v) < logHeaderLen {
		return State{}, fmt.Errorf("%w: sliding_log value of %d bytes", ErrBadState, len(v))
	}
	word := func(off int) int64 { return int64(binary.LittleEndian.Uint64(v[off:])) }
	total, head, size := word(tagLen), word(tagLen+8), word(tagLen+16)
	oldest, newest, base, src, moved := word(tagLen+24), word(tagLen+32), word(tagLen+40), word(tagLen+48), word(tagLen+56)
	if size > int64(len(v)) || head < logHeaderLen || head > size || (size-head)%16 != 0 ||
		!inRange(total, oldest, newest, base, src, moved) || base >= logModulus {
		return State{}, fmt.Errorf("%w: sliding_log head %d, size %d, length %d", ErrBadState, head, size, len(v))
	}
	if moved == 0 && src != 0 || moved != 0 && (src <= logHeaderLen || moved < src || moved > size ||
		(src-logHeaderLen)%16 != 0 || (moved-logHeaderLen)%16 != 0 || logHeaderLen+moved-src > head) {
		return State{}, fmt.Errorf("%w: sliding_log compaction from %d to %d, head %d", ErrBadState, src, moved, head)
	}
	var sum int64
	prev := base
	for off := int(head); off < int(size); off += 16 {
		stamp, run := word(off), word(off+8)
		if run < 0 || run >= logModulus || !inRange(stamp) {
			return State{}, fmt.Errorf("%w: sliding_log entry %d, running count %d", ErrBadState, stamp, run)
		}
		e := LogEntry{Stamp: stamp, Count: (run - prev + logModulus) % logModulus}
		if e.Count < 1 {
			return State{}, fmt.Errorf("%w: sliding_log entry %d×%d", ErrBadState, e.Stamp, e.Count)
		}
		if n := len(s.Log); n > 0 && e.Stamp <= s.Log[n-1].Stamp {
			return State{}, fmt.Errorf("%w: sliding_log stamps out of order", ErrBadState)
		}
		if sum += e.Count; sum > total {
			return State{}, fmt.Errorf("%w: sliding_log entries hold more than its total %d", ErrBadState, total)
		}
		s.Log = append(s.Log, e)
		prev = run
	}
	if n := len(s.Log); sum != total || n > 0 && (s.Log[0].Stamp != oldest || s.Log[n-1].Stamp != newest) {
		return State{}, fmt.Errorf("%w: sliding_log header (total %d, oldest %d, newest %d) disagrees with its entries",
			ErrBadState, total, oldest, newest)
	}
	return s, nil
}

// decodeLog1 parses a format 1 sliding log, the previous release's.
func decodeLog1(s State, v []byte) (State, error) {
	if len(v) < logHeader1Len {
		return State{}, fmt.Errorf("%w: sliding_log value of %d bytes", ErrBadState, len(v))
	}
	word := func(off int) int64 { return int64(binary.LittleEndian.Uint64(v[off:])) }
	total, head, size := word(tagLen), word(tagLen+8), word(tagLen+16)
	oldest, newest, ncount := word(tagLen+24), word(tagLen+32), word(tagLen+40)
	if size != int64(len(v)) || head < logHeader1Len || head > size || (size-head)%16 != 0 || !inRange(total, oldest, newest, ncount) {
		return State{}, fmt.Errorf("%w: sliding_log head %d, size %d, length %d", ErrBadState, head, size, len(v))
	}
	var sum int64
	for off := int(head); off < len(v); off += 16 {
		e := LogEntry{Stamp: word(off), Count: word(off + 8)}
		if e.Count < 1 || !inRange(e.Stamp, e.Count) {
			return State{}, fmt.Errorf("%w: sliding_log entry %d×%d", ErrBadState, e.Stamp, e.Count)
		}
		if n := len(s.Log); n > 0 && e.Stamp <= s.Log[n-1].Stamp {
			return State{}, fmt.Errorf("%w: sliding_log stamps out of order", ErrBadState)
		}
		sum += e.Count
		s.Log = append(s.Log, e)
	}
	if n := len(s.Log); sum != total || n > 0 && (s.Log[0].Stamp != oldest || s.Log[n-1].Stamp != newest || s.Log[n-1].Count != ncount) {
		return State{}, fmt.Errorf("%w: sliding_log header (total %d, oldest %d, newest %d×%d) disagrees with its entries",
			ErrBadState, total, oldest, newest, ncount)
	}
	return s, nil
}

// inRange reports whether every v is in [0, 2^53): no field the scripts
// write reaches 2^53 (Lua numbers are exact below it).
func inRange(vs ...int64) bool {
	for _, v := range vs {
		if v < 0 || v >= 1<<53 {
			return false
		}
	}
	return true
}
