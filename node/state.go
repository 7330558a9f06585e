package node

import (
	"encoding/binary"
	"fmt"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/remote"
)

// The states that move between nodes and to the store: one type
// (ringlimit.State) in memory, on the wire and in the store.

// encodeState is a state on the wire: until (ms, 8 bytes little-endian),
// then remote.EncodeState.
func encodeState(s ringlimit.State) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(s.Until))
	return append(b, remote.EncodeState(s)...)
}

func decodeState(b []byte) (ringlimit.State, error) {
	if len(b) < 8 {
		return ringlimit.State{}, fmt.Errorf("node: state of %d bytes", len(b))
	}
	s, err := remote.DecodeState(b[8:])
	if err != nil {
		return ringlimit.State{}, err
	}
	s.Until = int64(binary.LittleEndian.Uint64(b))
	return s, nil
}
