// Package nodetest runs ringlimit clusters inside one test process: real
// nodes on loopback sockets, with a Network that can drop, delay and
// partition the traffic between chosen nodes.
package nodetest

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// ErrCut is what a dial across a cut link returns.
var ErrCut = errors.New("nodetest: link cut")

type link struct{ from, to string }

// Network is a node.Network with faults. Nodes are named by their Config
// names; register each node's gossip address with Register so partitions
// reach the gossip too. The zero value is not usable: use NewNetwork.
// Network is safe for simultaneous use by multiple goroutines.
type Network struct {
	group map[string]int // Partition: node name → group (gossip); nil: healed

	mu     sync.Mutex
	cut    map[link]bool
	delay  map[link]time.Duration
	gossip map[string]string // name → gossip address
	conns  map[link]map[net.Conn]bool
	dialed map[link]string // the address of each link's last dial
}

// NewNetwork returns a Network with every link up.
func NewNetwork() *Network {
	return &Network{
		cut:    map[link]bool{},
		delay:  map[link]time.Duration{},
		gossip: map[string]string{},
		conns:  map[link]map[net.Conn]bool{},
		dialed: map[link]string{},
	}
}

// Dialed returns the address the node named from last dialled to reach the
// node named to, or "".
func (nw *Network) Dialed(from, to string) string {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.dialed[link{from, to}]
}

// Register tells the network the gossip address of the node named name.
func (nw *Network) Register(name, gossipAddr string) {
	nw.mu.Lock()
	nw.gossip[name] = gossipAddr
	nw.mu.Unlock()
}

// DialPeer implements node.Network.
func (nw *Network) DialPeer(ctx context.Context, from, to, addr string) (net.Conn, error) {
	l := link{from, to}
	nw.mu.Lock()
	cut, d := nw.cut[l], nw.delay[l]
	nw.dialed[l] = addr
	nw.mu.Unlock()
	if cut {
		return nil, ErrCut
	}
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	fc := &faultConn{Conn: c, nw: nw, l: l, delay: d}
	nw.mu.Lock()
	if nw.conns[l] == nil {
		nw.conns[l] = map[net.Conn]bool{}
	}
	nw.conns[l][fc] = true
	nw.mu.Unlock()
	return fc, nil
}

// WrapGossip implements node.Network.
func (nw *Network) WrapGossip(from string, t ring.Transport) ring.Transport {
	return &gossipFault{Transport: t, nw: nw, from: from}
}

// gossipFault drops the packets and refuses the streams a node sends across
// a Partition.
type gossipFault struct {
	ring.Transport
	nw   *Network
	from string
}

func (g *gossipFault) WriteTo(b []byte, addr string) (time.Time, error) {
	if g.nw.gossipCut(g.from, addr) {
		return time.Now(), nil // lost on the way
	}
	return g.Transport.WriteTo(b, addr)
}

func (g *gossipFault) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if g.nw.gossipCut(g.from, addr) {
		return nil, ErrCut
	}
	return g.Transport.DialTimeout(addr, timeout)
}

// gossipCut reports whether the node named from is partitioned from the
// node whose gossip address is addr.
func (nw *Network) gossipCut(from, addr string) bool {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if nw.group == nil {
		return false
	}
	gf, ok := nw.group[from]
	if !ok {
		return false
	}
	for name, a := range nw.gossip {
		if a == addr {
			gt, ok := nw.group[name]
			return ok && gt != gf
		}
	}
	return false
}

// Drop cuts the peer link from → to (one way): dials fail and open
// connections are closed. Gossip is not affected (see Partition).
func (nw *Network) Drop(from, to string) {
	nw.mu.Lock()
	nw.cut[link{from, to}] = true
	conns := nw.conns[link{from, to}]
	delete(nw.conns, link{from, to})
	nw.mu.Unlock()
	for c := range conns {
		c.(*faultConn).Conn.Close()
	}
}

// Restore undoes Drop on the link from → to, keeping any delay (Heal
// restores every link and ends every delay).
func (nw *Network) Restore(from, to string) {
	nw.mu.Lock()
	delete(nw.cut, link{from, to})
	nw.mu.Unlock()
}

// Delay adds d of latency to the answers on the peer link from → to, for
// connections dialled from now on.
func (nw *Network) Delay(from, to string, d time.Duration) {
	nw.mu.Lock()
	nw.delay[link{from, to}] = d
	nw.mu.Unlock()
}

// Partition splits the named nodes into groups that reach only their own
// group, for peer connections and gossip alike.
func (nw *Network) Partition(groups ...[]string) {
	g := map[string]int{}
	for i, grp := range groups {
		for _, name := range grp {
			g[name] = i
			for j, other := range groups {
				if i == j {
					continue
				}
				for _, o := range other {
					nw.Drop(name, o)
				}
			}
		}
	}
	nw.mu.Lock()
	nw.group = g
	nw.mu.Unlock()
}

// Heal restores every link.
func (nw *Network) Heal() {
	nw.mu.Lock()
	nw.cut = map[link]bool{}
	nw.delay = map[link]time.Duration{}
	nw.group = nil
	nw.mu.Unlock()
}

type faultConn struct {
	net.Conn
	nw       *Network
	l        link
	delay    time.Duration
	deadline atomic.Value // time.Time: the read deadline

	// Bytes read from the socket whose delay a read deadline cut short:
	// the next reads return them once their delay has passed (a slow
	// link loses nothing to a caller's deadline). Reads are one at a time.
	held  []byte
	ready time.Time
}

// Read delays what arrives by the link's latency, honouring the read
// deadline as a slow network would: bytes still on their way when it
// passes are not lost, only late.
func (c *faultConn) Read(b []byte) (int, error) {
	if len(c.held) == 0 {
		n, err := c.Conn.Read(b)
		if n == 0 || c.delay <= 0 {
			return n, err
		}
		c.held, c.ready = append(c.held[:0], b[:n]...), time.Now().Add(c.delay)
	}
	if wait := time.Until(c.ready); wait > 0 {
		if dl, ok := c.deadline.Load().(time.Time); ok && !dl.IsZero() && time.Until(dl) < wait {
			time.Sleep(max(time.Until(dl), 0)) // the fault being simulated: a slow link
			return 0, os.ErrDeadlineExceeded
		}
		time.Sleep(wait) // the fault being simulated: a slow link
	}
	n := copy(b, c.held)
	c.held = c.held[n:]
	return n, nil
}

func (c *faultConn) SetDeadline(t time.Time) error {
	c.deadline.Store(t)
	return c.Conn.SetDeadline(t)
}

func (c *faultConn) SetReadDeadline(t time.Time) error {
	c.deadline.Store(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *faultConn) Close() error {
	c.nw.mu.Lock()
	delete(c.nw.conns[c.l], c)
	c.nw.mu.Unlock()
	return c.Conn.Close()
}
