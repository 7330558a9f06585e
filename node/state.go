package node

import (
	"encoding/binary"
	"fmt"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/remote"
)

// The states that move between nodes and to the store: one type
// (ringlimit.State) in memory, on the wire and in the store.

// encodeState is a key's states on the wire, s first, then each of s.More
// (the key's states at other indexes, see local.Limiter.Take), each as one
// record:
//
//	until (ms) | index << 56 (u64 little-endian) | value length u32 (little-endian) | remote.EncodeStateFormat1
//
// until is below 2^53, so the top byte is free for the index. A sliding log
// goes in format 1, which a peer of the previous release decodes too (the
// store's format 2 it would drop); decodeState takes both.
func encodeState(s ringlimit.State) []byte {
	b := appendState(nil, s)
	for _, m := range s.More {
		b = appendState(b, m)
	}
	return b
}

func appendState(b []byte, s ringlimit.State) []byte {
	v := remote.EncodeStateFormat1(s)
	b = binary.LittleEndian.AppendUint64(b, uint64(s.Until)&(1<<56-1)|uint64(s.Index)<<56)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// decodeState parses what encodeState wrote: at least one state, at most
// ringlimit.MaxRules, with distinct indexes below ringlimit.MaxRules.
func decodeState(b []byte) (ringlimit.State, error) {
	var out ringlimit.State
	var seen [ringlimit.MaxRules]bool
	for k := 0; len(b) > 0 || k == 0; k++ {
		if len(b) < 12 {
			return ringlimit.State{}, fmt.Errorf("node: state record of %d bytes", len(b))
		}
		head := binary.LittleEndian.Uint64(b)
		n := binary.LittleEndian.Uint32(b[8:])
		idx := int(head >> 56)
		if idx >= ringlimit.MaxRules || seen[idx] {
			return ringlimit.State{}, fmt.Errorf("node: state of index %d (twice, or past %d)", idx, ringlimit.MaxRules-1)
		}
		seen[idx] = true
		if uint64(n) > uint64(len(b)-12) {
			return ringlimit.State{}, fmt.Errorf("node: state value of %d bytes in %d", n, len(b)-12)
		}
		s, err := remote.DecodeState(b[12 : 12+n])
		if err != nil {
			return ringlimit.State{}, err
		}
		s.Until, s.Index = int64(head&(1<<56-1)), idx
		if k == 0 {
			out = s
		} else {
			out.More = append(out.More, s)
		}
		b = b[12+n:]
	}
	return out, nil
}
