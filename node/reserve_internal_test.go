package node

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
)

// FuzzParseGive: a give message from a peer either parses into a valid
// call's key, rule and hits, or is refused; it never panics, and what
// parses encodes back to the same bytes.
func FuzzParseGive(f *testing.F) {
	r := giveRequest("k", ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute}, memstore.Charge{N: 3, At: 1_765_000_000_123, Remaining: 7})
	f.Add(r.States[0].Key, r.States[0].Value, r.States[1].Key, r.States[1].Value)
	f.Add(giveMagic, []byte{}, "", []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, k0 string, v0 []byte, k1 string, v1 []byte) {
		key, rule, ch, err := parseGive([]peer.Item{{Key: k0, Value: v0}, {Key: k1, Value: v1}})
		if err != nil {
			if !errors.Is(err, errGiveMsg) {
				t.Fatalf("error %v, not errGiveMsg", err)
			}
			return
		}
		if ringlimit.ValidateCall(key, rule, ch.N) != nil || ch.N <= 0 || ch.At < 0 || ch.Remaining < 0 || ch.Remaining > rule.Capacity() {
			t.Fatalf("parsed a bad give: %q %+v %+v", key, rule, ch)
		}
		back := giveRequest(key, rule, ch)
		if string(back.States[1].Value) != string(v1) {
			t.Fatalf("round trip: %x, want %x", back.States[1].Value, v1)
		}
	})
}
