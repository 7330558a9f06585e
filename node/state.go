package node

import (
	"encoding/binary"
	"fmt"

	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
)

// The states that move between nodes and to the store.

// encodeState is a state on the wire: until (ms, 8 bytes little-endian),
// then remote.EncodeState.
func encodeState(s local.State) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(s.Until))
	return append(b, remote.EncodeState(toRemote(s))...)
}

func decodeState(b []byte) (local.State, error) {
	if len(b) < 8 {
		return local.State{}, fmt.Errorf("node: state of %d bytes", len(b))
	}
	rs, err := remote.DecodeState(b[8:])
	if err != nil {
		return local.State{}, err
	}
	return fromRemote(rs, int64(binary.LittleEndian.Uint64(b))), nil
}

func toRemote(s local.State) remote.State {
	r := remote.State{Algorithm: s.Algorithm, Window: s.Window, A: s.A, B: s.B, C: s.C}
	if len(s.Log) > 0 {
		r.Log = make([]remote.LogEntry, len(s.Log))
		for i, e := range s.Log {
			r.Log[i] = remote.LogEntry{Stamp: e.Stamp, Count: e.Count}
		}
	}
	return r
}

func fromRemote(r remote.State, until int64) local.State {
	s := local.State{Algorithm: r.Algorithm, Window: r.Window, A: r.A, B: r.B, C: r.C, Until: until}
	if len(r.Log) > 0 {
		s.Log = make([]local.LogEntry, len(r.Log))
		for i, e := range r.Log {
			s.Log[i] = local.LogEntry{Stamp: e.Stamp, Count: e.Count}
		}
	}
	return s
}
