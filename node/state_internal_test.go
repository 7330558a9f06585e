package node

import (
	"reflect"
	"testing"

	"github.com/ringlimit/ringlimit"
)

func sampleStates() ringlimit.State {
	return ringlimit.State{Algorithm: ringlimit.FixedWindow, Window: 1000, A: 5, B: 3, Until: 1_780_000_000_000,
		More: []ringlimit.State{
			{Algorithm: ringlimit.SlidingLog, Window: 60000, Index: 1, Until: 1_780_000_050_000, Log: []ringlimit.LogEntry{{Stamp: 1_779_999_990_000, Count: 2}}},
			{Algorithm: ringlimit.TokenBucket, Window: 10000, Index: 3, A: 7, B: 1_779_999_999_000, Until: 1_780_000_001_000},
		}}
}

// A key's states travel together and come back as they were.
func TestStatesRoundTrip(t *testing.T) {
	for _, s := range []ringlimit.State{sampleStates(), {Algorithm: ringlimit.LeakyBucket, Window: 5, A: 1, B: 2, Until: 9}} {
		got, err := decodeState(encodeState(s))
		if err != nil || !reflect.DeepEqual(got, s) {
			t.Fatalf("%+v → %+v, %v", s, got, err)
		}
	}
	b := encodeState(sampleStates())
	for _, bad := range [][]byte{nil, b[:11], b[:len(b)-1], append(encodeState(sampleStates().More[0]), encodeState(sampleStates().More[0])...)} {
		if _, err := decodeState(bad); err == nil {
			t.Errorf("decoded %x", bad)
		}
	}
}

// FuzzDecodeState: whatever decodes re-encodes to the same bytes, and
// nothing panics.
func FuzzDecodeState(f *testing.F) {
	f.Add(encodeState(sampleStates()))
	f.Add(encodeState(ringlimit.State{Algorithm: ringlimit.SlidingWindow, Window: 7, A: 1, B: 2, C: 3, Until: 4}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeState(b)
		if err != nil {
			return
		}
		again, err := decodeState(encodeState(s))
		if err != nil || !reflect.DeepEqual(again, s) {
			t.Fatalf("%+v does not round-trip: %+v, %v", s, again, err)
		}
	})
}

// A sliding log crosses the wire in format 1 (its value starts with the
// algorithm's byte, 3), which a peer of the previous release decodes; it
// would drop the store's format 2 (byte 131) with a warning, and start the
// key afresh.
func TestEncodeStateLogFormat1(t *testing.T) {
	s := ringlimit.State{Algorithm: ringlimit.SlidingLog, Window: 1000, Until: 7,
		Log: []ringlimit.LogEntry{{Stamp: 5, Count: 2}, {Stamp: 6, Count: 1}}}
	b := encodeState(s)
	if b[12] != byte(ringlimit.SlidingLog) {
		t.Fatalf("the log's value starts with byte %d, want %d (format 1)", b[12], ringlimit.SlidingLog)
	}
	if got, err := decodeState(b); err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, s)
	}
}
