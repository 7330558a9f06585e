package ring

import (
	"encoding/binary"
	"errors"
)

// metaVersion is the version byte that starts every member's metadata.
//
// Layout (version 1): version byte, then RPCAddr as a uvarint length and its
// bytes, then (if not zero) the incarnation as a uvarint. A later version may append fields after these: a decoder reads the
// fields it knows and ignores the rest, so old and new members can mix.
const metaVersion = 1

// metaMaxSize is memberlist's limit on a member's metadata (MetaMaxSize).
const metaMaxSize = 512

// meta is what peers need to know about a member beyond its name and gossip
// address.
type meta struct {
	RPCAddr string // where its peer RPC server listens; "" if none
	Inc     uint64 // its incarnation (Config.Incarnation); 0 if none
}

var errBadMeta = errors.New("ring: malformed member metadata")

func (m meta) encode() []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(m.RPCAddr))
	b = append(b, metaVersion)
	b = binary.AppendUvarint(b, uint64(len(m.RPCAddr)))
	b = append(b, m.RPCAddr...)
	if m.Inc != 0 {
		b = binary.AppendUvarint(b, m.Inc) // (a member of the release before it ignores it)
	}
	return b
}

func decodeMeta(b []byte) (meta, error) {
	if len(b) == 0 || b[0] < metaVersion {
		return meta{}, errBadMeta
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return meta{}, errBadMeta
	}
	md := meta{RPCAddr: string(b[k : k+int(n)])}
	if rest := b[k+int(n):]; len(rest) > 0 {
		inc, j := binary.Uvarint(rest)
		if j <= 0 {
			return meta{}, errBadMeta
		}
		md.Inc = inc
	}
	return md, nil
}
