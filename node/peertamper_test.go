package node_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// tamperNetwork flips one byte of what a peer connection dialled by node
// from receives: the Allowed byte of one answer to a call of the test, read
// while that call is in flight, from its third call on (see tamperCalls).
// It finds the answer by parsing the records, not by counting them: other
// messages share the link (the ring change's hand-off messages and their
// answers), and under load they come when they come.
type tamperNetwork struct {
	*nodetest.Network
	from   string
	sealed bool
	armed  atomic.Bool
	fired  atomic.Bool
	call   atomic.Int32 // the test's call in flight (1, 2, ...), 0 between calls
}

func (nw *tamperNetwork) DialPeer(ctx context.Context, from, to, addr string) (net.Conn, error) {
	c, err := nw.Network.DialPeer(ctx, from, to, addr)
	if err != nil || from != nw.from || !nw.armed.Load() {
		return c, err
	}
	// The server's greeting (magic, version, nonce, name) and proof; the
	// client's hello (magic, version, nonce, proof).
	const greeting, proof, hello = 3 + 1 + 32 + 1, 32, 3 + 1 + 32 + 32
	return &flipConn{Conn: c, nw: nw, skip: greeting + len(to) + proof, wskip: hello, allow: map[uint64]bool{}}, nil
}

// flipConn parses the records it carries: each is a 4-byte length and a
// payload; in clear the payload is the frame (version, type, body length,
// id u64, body), and a result's Allowed is byte 15 of its payload. Sealed,
// the type and id cannot be read, and any record read while a call of the
// test is in flight will do: when it fails to open, that call fails.
type flipConn struct {
	net.Conn
	nw   *tamperNetwork
	skip int // handshake bytes still to come

	mu    sync.Mutex
	wskip int             // hello bytes still to write
	allow map[uint64]bool // ids of the allow requests written (in clear)
	out   []byte          // written bytes not parsed yet

	pos  int      // in the record being read
	size int      // its payload's length
	head [18]byte // its length and first 14 payload bytes
}

func (c *flipConn) Write(b []byte) (int, error) {
	if !c.nw.sealed {
		c.mu.Lock()
		w := b[min(c.wskip, len(b)):]
		c.wskip -= len(b) - len(w)
		c.out = append(c.out, w...)
		for len(c.out) >= 4+14 {
			n := 4 + int(binary.BigEndian.Uint32(c.out))
			if len(c.out) < n {
				break
			}
			if c.out[4+1] == 1 { // typeAllow
				c.allow[binary.BigEndian.Uint64(c.out[4+6:])] = true
			}
			c.out = c.out[n:]
		}
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *flipConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	for i := range n {
		if c.skip > 0 {
			c.skip--
			continue
		}
		if c.pos < len(c.head) {
			c.head[c.pos] = b[i]
		}
		if c.pos == 3 {
			c.size = int(binary.BigEndian.Uint32(c.head[:]))
		}
		if c.pos == 4+15 && c.target() {
			b[i] ^= 1
		}
		if c.pos++; c.pos > 3 && c.pos == 4+c.size {
			c.pos = 0
		}
	}
	return n, err
}

// target reports whether the record being read is the one to flip, and
// if so takes the one flip there is.
func (c *flipConn) target() bool {
	if c.nw.call.Load() < 3 {
		return false
	}
	if !c.nw.sealed {
		c.mu.Lock()
		ok := c.head[4+1] == 3 && c.allow[binary.BigEndian.Uint64(c.head[4+6:])] // typeResult
		c.mu.Unlock()
		if !ok {
			return false
		}
	}
	return c.nw.fired.CompareAndSwap(false, true)
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
			altered, elsewhere := tamperCalls(t, a, o, &tn.call)
			st := a.Stats()
			t.Logf("altered %d, decided elsewhere %d, stats %+v", altered, elsewhere, st.Peer)
			if !tn.fired.Load() {
				t.Fatal("no answer was flipped")
			}
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
func tamperCalls(t *testing.T, a, o *node.Node, call *atomic.Int32) (altered, elsewhere int) {
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 1, Window: time.Hour}
	for i, k := range keysOwnedBy(a, o.Name(), 10) {
		firstElsewhere := false
		for j := range 2 {
			call.Store(int32(2*i + j + 1))
			d, err := a.Allow(ctx, k, rule)
			call.Store(0)
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
