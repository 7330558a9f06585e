package node

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/ring"
)

// peerConn is the way to one peer: a multiplexed connection behind a
// breaker, so a dead peer costs its callers nothing after a few failures.
type peerConn struct {
	name    string
	addr    string
	client  *peer.Client // forwarded calls
	bulk    *peer.Client // hand-off pushes and pulls, apart so that a pull never waits behind a push on one connection
	breaker *failover.Breaker
}

// peerTable maps member names to their connections. Lookups read an
// immutable map through an atomic pointer; changes copy it under a mutex.
type peerTable struct {
	n   *Node
	mu  sync.Mutex
	m   atomic.Pointer[map[string]*peerConn]
	off bool // closed: no new connections

	rejectedGone atomic.Uint64 // frames rejected by clients closed since
}

// rejected counts the frames this node's clients rejected.
func (t *peerTable) rejected() uint64 {
	n := t.rejectedGone.Load()
	for _, pc := range *t.m.Load() {
		n += pc.client.Stats().RejectedFrames + pc.bulk.Stats().RejectedFrames
	}
	return n
}

// closeConn closes pc's clients and keeps their counts.
func (t *peerTable) closeConn(pc *peerConn) {
	pc.client.Close()
	pc.bulk.Close()
	t.rejectedGone.Add(pc.client.Stats().RejectedFrames + pc.bulk.Stats().RejectedFrames)
}

func (t *peerTable) init(n *Node) {
	t.n = n
	t.m.Store(&map[string]*peerConn{})
}

// get returns the connection to the member named name, making it on first
// use; nil if the member's address is unknown or the node is closing.
func (t *peerTable) get(name string) *peerConn {
	if pc := (*t.m.Load())[name]; pc != nil {
		return pc
	}
	addr, ok := t.n.members.RPCAddr(name)
	if !ok {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	if pc := old[name]; pc != nil {
		return pc
	}
	if t.off {
		return nil
	}
	pc := t.dial(name, addr)
	next := make(map[string]*peerConn, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name] = pc
	t.m.Store(&next)
	return pc
}

// current is the connection in the table for name, without dialling.
func (t *peerTable) current(name string) *peerConn { return (*t.m.Load())[name] }

func (t *peerTable) dial(name, addr string) *peerConn {
	cfg := t.n.cfg
	cc := peer.ClientConfig{Addr: addr, Name: name, Secret: cfg.SecretKey, Timeout: cfg.ForwardTimeout}
	if nw := cfg.Network; nw != nil {
		from := t.n.name
		cc.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return nw.DialPeer(ctx, from, name, addr) }
	}
	return &peerConn{
		name:   name,
		addr:   addr,
		client: peer.NewClient(cc),
		bulk:   peer.NewClient(cc),
		breaker: failover.NewBreaker(failover.BreakerConfig{
			Name:        "peer " + name,
			MaxFailures: 3,
			Cooldown:    500 * time.Millisecond,
			Logger:      cfg.Logger,
		}),
	}
}

// update drops the connections of members that left, or whose address
// changed. It runs on the membership's goroutine after each change.
func (t *peerTable) update(ev ring.Event) {
	t.mu.Lock()
	old := *t.m.Load()
	next := make(map[string]*peerConn, len(old))
	var gone []*peerConn
	for name, pc := range old {
		if addr, ok := t.n.members.RPCAddr(name); ok && addr == pc.addr && ev.Ring.Contains(name) {
			next[name] = pc
		} else {
			gone = append(gone, pc)
		}
	}
	t.m.Store(&next)
	t.mu.Unlock()
	for _, pc := range gone {
		t.closeConn(pc)
	}
	addrs := make([]string, 0, ev.Ring.Len()) // the members' addresses keep their handshake slots
	for _, name := range ev.Ring.Members() {
		if addr, ok := t.n.members.RPCAddr(name); ok {
			addrs = append(addrs, addr)
		}
	}
	t.n.memberIPs.Set(addrs)
	t.n.ringChanged(ev.Ring)
	if len(ev.Joined)+len(ev.Left) > 0 {
		t.n.cfg.Logger.Info("node: membership changed", "node", t.n.name,
			"joined", ev.Joined, "left", ev.Left, "members", ev.Ring.Len())
	}
}

// closeAll closes every connection; no new ones are made.
func (t *peerTable) closeAll() {
	t.mu.Lock()
	t.off = true
	old := *t.m.Load()
	t.m.Store(&map[string]*peerConn{})
	t.mu.Unlock()
	for _, pc := range old {
		t.closeConn(pc)
	}
}

// states reports each peer's breaker state.
func (t *peerTable) states() map[string]failover.State {
	out := map[string]failover.State{}
	for name, pc := range *t.m.Load() {
		out[name] = pc.breaker.State()
	}
	return out
}

// Quick reports whether r is answered from memory at once: a plain call or
// reset while no hand-off is under way, or during one for a key whose state
// is already here. Hand-off steps, redirected calls and calls that may
// first fetch a key's state are served on a worker of the connection, so
// they delay no other call on it.
func (h ownerHandler) Quick(r *peer.Request) bool {
	if (r.Op != peer.OpAllow && r.Op != peer.OpAllowAll && r.Op != peer.OpReset) || r.From != "" {
		return false
	}
	n := h.n
	if n.holders.leaving.Load() != nil {
		return false
	}
	return !n.changing.Load() || n.local.Has(r.Key)
}

var _ peer.Quick = ownerHandler{}
