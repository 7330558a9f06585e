package node_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// tamperNetwork flips one byte of what the first peer connection dialled by
// node from receives: the Allowed byte of the third answer.
type tamperNetwork struct {
	*nodetest.Network
	from   string
	sealed bool
	armed  atomic.Bool
	fired  atomic.Bool
}

func (nw *tamperNetwork) DialPeer(ctx context.Context, from, to, addr string) (net.Conn, error) {
	c, err := nw.Network.DialPeer(ctx, from, to, addr)
	if err != nil || from != nw.from || !nw.armed.Load() || !nw.fired.CompareAndSwap(false, true) {
		return c, err
	}
	// The server's greeting and proof, then records of 4 + 14 + 43 (+ 16
	// sealed) bytes; Allowed is byte 15 of a record's payload.
	const greeting, proof = 3 + 1 + 32 + 1, 32
	return &flipConn{Conn: c, at: greeting + len(to) + proof + 2*nw.record() + 4 + 15}, nil
}

func (nw *tamperNetwork) record() int {
	if nw.sealed {
		return 4 + 14 + 43 + 16
	}
	return 4 + 14 + 43
}

type flipConn struct {
	net.Conn
	off, at int
}

func (c *flipConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if i := c.at - c.off; i >= 0 && i < n {
		b[i] ^= 1
	}
	c.off += n
	return n, err
}

// A byte flipped on the wire between two nodes never changes a decision:
// the sealed answer fails to open, the call in flight goes on as for a
// dead peer (here to the fallback policy: there is no store), and the
// frame is counted. In clear, the same flip turns an answer around.
func TestTamperedAnswerNeverDecides(t *testing.T) {
	for _, sealed := range []bool{true, false} {
		t.Run(fmt.Sprint("sealed=", sealed), func(t *testing.T) {
			var tn *tamperNetwork
			c := nodetest.Start(t, 2, func(cfg *node.Config) {
				if !sealed {
					cfg.SecretKey = nil
				}
				if tn == nil {
					tn = &tamperNetwork{Network: cfg.Network.(*nodetest.Network), from: cfg.Name, sealed: sealed}
				}
				cfg.Network = tn
			})
			a, o := c.Nodes[0], c.Nodes[1]
			// The link works; then it is cut and healed, and the next
			// connection is the tampered one.
			awaitPeerDecision(t, a, keysOwnedBy(a, o.Name(), 1)[0])
			tn.armed.Store(true)
			tn.Drop(a.Name(), o.Name())
			tn.Heal()
			altered, elsewhere := tamperCalls(t, a, o)
			st := a.Stats()
			t.Logf("altered %d, decided elsewhere %d, stats %+v", altered, elsewhere, st.Peer)
			if sealed {
				if altered != 0 || elsewhere == 0 || st.Peer.RejectedFrames == 0 {
					t.Fatalf("sealed: %d altered decisions, %d decided elsewhere, %d frames rejected", altered, elsewhere, st.Peer.RejectedFrames)
				}
			} else if altered == 0 {
				t.Fatal("in clear the flip altered nothing: the test does not reach the answer")
			}
		})
	}
}

// tamperCalls calls a on ten keys that o owns, twice each, under a rule
// that allows one call per key: an owner's answer is "allowed" for the
// first call and "denied" for the second. It counts the owner's answers
// that say otherwise, and the calls decided by another tier. (After a call
// decided elsewhere the owner's next answer may be either: the call that
// went elsewhere may have been decided by the owner too, its answer lost.)
func tamperCalls(t *testing.T, a, o *node.Node) (altered, elsewhere int) {
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 1, Window: time.Hour}
	for _, k := range keysOwnedBy(a, o.Name(), 10) {
		firstElsewhere := false
		for j := range 2 {
			d, err := a.Allow(ctx, k, rule)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case d.Source != ringlimit.Peer:
				elsewhere++
				firstElsewhere = firstElsewhere || j == 0
			case firstElsewhere:
			case d.Allowed != (j == 0):
				altered++
			}
		}
	}
	return altered, elsewhere
}

// awaitPeerDecision calls nd on key until its owner decides it: under load
// the first dial and handshake may take longer than the forward timeout.
func awaitPeerDecision(t *testing.T, nd *node.Node, key string) {
	t.Helper()
	rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		d, err := nd.Allow(ctx, key, rule)
		if err == nil && d.Source == ringlimit.Peer {
			return
		}
		if errors.Is(err, ringlimit.ErrInvalidRule) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision by the owner in 20 s: %+v, %v", d, err)
		}
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
}
