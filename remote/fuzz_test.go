package remote_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/remote"
)

// DecodeState takes any bytes without panicking, refuses with ErrBadState
// what it does not take, and what it takes encodes to a value that decodes
// to the same state, no longer than the input (but for the 16 bytes a
// format 1 sliding log's header gains in format 2).
func FuzzDecodeState(f *testing.F) {
	for _, s := range []remote.State{
		{Algorithm: ringlimit.TokenBucket, Window: 1000, A: 5000, B: 1_700_000_000_000},
		{Algorithm: ringlimit.LeakyBucket, Window: 60_000, A: 1, B: 2},
		{Algorithm: ringlimit.TokenBucket, Window: 1000, A: 5000, B: 1_700_000_000_000, C: 1_700_000_000_000_000}, // with its epoch
		{Algorithm: ringlimit.LeakyBucket, Window: 60_000, A: 1, B: 2, C: 1<<53 - 1},
		{Algorithm: ringlimit.FixedWindow, Window: 1, A: 3, B: 4},
		{Algorithm: ringlimit.SlidingWindow, Window: 86_400_000, A: 19_000, B: 7, C: 9},
		{Algorithm: ringlimit.SlidingLog, Window: 100, Log: []remote.LogEntry{{Stamp: 10, Count: 2}, {Stamp: 11, Count: 1}}},
		{Algorithm: ringlimit.SlidingLog, Window: 100},
	} {
		v := remote.EncodeState(s)
		f.Add(v)
		f.Add(v[:len(v)-1])
		f.Add(append(v, 0))
		if s.Algorithm == ringlimit.SlidingLog {
			f.Add(format1(s)) // the previous release's
		}
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := remote.DecodeState(v)
		if err != nil {
			if !errors.Is(err, remote.ErrBadState) {
				t.Fatalf("error %v does not wrap ErrBadState", err)
			}
			return
		}
		again := remote.EncodeState(s)
		// Format 2's header is 16 bytes longer than format 1's.
		if len(again) > len(v) && !(v[0] == byte(ringlimit.SlidingLog) && len(again) <= len(v)+16) {
			t.Fatalf("%x decodes to %+v, which encodes longer: %x", v, s, again)
		}
		s2, err := remote.DecodeState(again)
		if err != nil || !reflect.DeepEqual(s, s2) && !(len(s.Log) == 0 && len(s2.Log) == 0) {
			t.Fatalf("%x: %+v re-encodes to %x, which decodes to %+v, %v", v, s, again, s2, err)
		}
		if s.Algorithm != ringlimit.SlidingLog && !bytes.Equal(again, v) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", v, s, again)
		}
	})
}

// EncodeStateFormat1 writes what the previous release wrote (format1, from
// that release's EncodeState), and DecodeState reads it back.
func TestEncodeStateFormat1(t *testing.T) {
	for _, s := range []remote.State{
		{Algorithm: ringlimit.SlidingLog, Window: 100, Log: []remote.LogEntry{{Stamp: 10, Count: 2}, {Stamp: 11, Count: 1}, {Stamp: 90, Count: 7}}},
		{Algorithm: ringlimit.SlidingLog, Window: 100},
		{Algorithm: ringlimit.TokenBucket, Window: 1000, A: 5000, B: 1_700_000_000_000},
	} {
		v := remote.EncodeStateFormat1(s)
		want := remote.EncodeState(s)
		if s.Algorithm == ringlimit.SlidingLog {
			want = format1(s)
		}
		if !bytes.Equal(v, want) {
			t.Errorf("%+v: %x, want %x", s, v, want)
		}
		got, err := remote.DecodeState(v)
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Errorf("%x decodes to %+v, %v; want %+v", v, got, err, s)
		}
	}
}

// format1 is s as the previous release stored a sliding log: a 57-byte
// header (total, head, size, oldest, newest, newest's count), then each
// entry's stamp and own count.
func format1(s remote.State) []byte {
	le := binary.LittleEndian
	b := le.AppendUint64([]byte{byte(ringlimit.SlidingLog)}, uint64(s.Window))
	var total, oldest, newest, ncount int64
	for _, e := range s.Log {
		total += e.Count
	}
	if n := len(s.Log); n > 0 {
		oldest, newest, ncount = s.Log[0].Stamp, s.Log[n-1].Stamp, s.Log[n-1].Count
	}
	for _, x := range []int64{total, 57, int64(57 + 16*len(s.Log)), oldest, newest, ncount} {
		b = le.AppendUint64(b, uint64(x))
	}
	for _, e := range s.Log {
		b = le.AppendUint64(le.AppendUint64(b, uint64(e.Stamp)), uint64(e.Count))
	}
	return b
}

// A stored version decodes from any bytes without panicking: what
// DecodeVersion takes (40 bytes, epoch and seq below 2^53) encodes back to
// the same bytes, and what it refuses it refuses with ErrBadState.
func FuzzDecodeVersion(f *testing.F) {
	for _, v := range []remote.Version{{}, {Epoch: 1_700_000_000_000, Seq: 3, Origins: [3]uint64{1, 1 << 63, 0}}, {Epoch: 1<<53 - 1, Seq: 1<<53 - 1}} {
		b := remote.EncodeVersion(v)
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(append(b, 0))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := remote.DecodeVersion(b)
		if err != nil {
			if !errors.Is(err, remote.ErrBadState) {
				t.Fatalf("error %v does not wrap ErrBadState", err)
			}
			return
		}
		if v.Epoch >= 1<<53 || v.Seq >= 1<<53 {
			t.Fatalf("%x decodes to %+v: out of range", b, v)
		}
		if again := remote.EncodeVersion(v); !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, v, again)
		}
	})
}

// A stored claim decodes from any bytes without panicking: what
// DecodeClaim takes (an incarnation, then a member of 1 to MaxMemberLen
// bytes) encodes back to the same bytes, and what it refuses it refuses
// with ErrBadState.
func FuzzDecodeClaim(f *testing.F) {
	f.Add(remote.EncodeClaim("n1", 7))
	f.Add(remote.EncodeClaim("", 7))
	f.Add(remote.EncodeClaim(string(bytes.Repeat([]byte{'m'}, remote.MaxMemberLen)), 1<<63))
	f.Add([]byte("1234567"))
	f.Fuzz(func(t *testing.T, b []byte) {
		member, inc, err := remote.DecodeClaim(b)
		if err != nil {
			if !errors.Is(err, remote.ErrBadState) {
				t.Fatalf("error %v does not wrap ErrBadState", err)
			}
			return
		}
		if member == "" || len(member) > remote.MaxMemberLen {
			t.Fatalf("%x decodes to member %q", b, member)
		}
		if again := remote.EncodeClaim(member, inc); !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %q, %d, which encodes to %x", b, member, inc, again)
		}
	})
}
