package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/logsum"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/ring"
)

// Node is one member of a ringlimit cluster, embedded in a service instance.
// It decides the keys it owns from its own memory, forwards the others to
// their owner, and falls back to the central store, then to its Policy, when
// an owner cannot be reached. Callers see an error only for bad input, a
// closed node or a cancelled context.
//
// Node is safe for simultaneous use by multiple goroutines.
type Node struct {
	cfg     Config
	name    string
	local   *memstore.Limiter // the states this node holds (internal/memstore: package local's store, with the hand-over steps)
	members *ring.Membership
	server  *peer.Server
	store   *failover.Limiter
	states  stateStore   // the store's state access for write-behind and loads; nil if none
	closer  func() error // closes the store's client, if the node made one

	peers     peerTable
	memberIPs peer.Members // the members' addresses, for the peer server's kept handshake slots

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	stop      chan struct{}
	wg        sync.WaitGroup

	stats counters
	obs   observer           // decisions by source and result, latency (observe.go)
	warn  *logsum.Summarizer // repeated warnings: one line per kind per interval, then a count

	// Hand-off (own.go, handoff.go): the ownership core and what the
	// shell keeps beside it.
	own        owner
	fresh      func(uint64) bool // own.freshSince, bound once (the fast path passes it to local)
	moves      moves             // what the next push looks at
	started    time.Time
	kickPush   chan struct{}
	joined     chan struct{} // closed once the ring has held another member
	joinedOnce sync.Once
	deciding   chan struct{} // closed once the core decides keys: joined, or alone
	decideOnce sync.Once
	bgMu       sync.Mutex     // orders starting pulls with Close
	bg         sync.WaitGroup // the pulls in flight
	bgOff      bool           // closing: no new pull goroutine
	settling   bool           // a settle runs (settle.go; under own.mu)
	// recallAnswered, if set (tests), runs before this node answers a
	// recall of a lease it held, with what the lease had left.
	recallAnswered func(left int64)
	// leavingHook, if set (tests), stands for the membership's Leaving.
	leavingHook atomic.Pointer[func(name string) (uint64, bool)]
	ready       atomic.Bool // latched by Ready
	goneMu      sync.Mutex
	gone        map[string]time.Time // members a hand-off message found gone lately (recentlyGone)
	tracing     bool                 // the hand-off trace is on (trace.go)

	leases leases // hot keys' leases, held and lent (lease.go)
}

var _ ringlimit.Limiter = (*Node)(nil)

// New starts a node: it binds the peer listener and the gossip listener,
// joins the cluster (in the background if no Join address answers), and
// connects to the store (in the background if it is down). Close stops it.
func New(cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(cfg.SecretKey) == 0 {
		cfg.Logger.Warn("node: no SecretKey: gossip is not encrypted, peers are not authenticated and the peer link is in clear; for demos only", "node", cfg.Name)
	}
	n := &Node{
		cfg:      cfg,
		name:     cfg.Name,
		stop:     make(chan struct{}),
		started:  time.Now(),
		kickPush: make(chan struct{}, 1),
		joined:   make(chan struct{}),
		deciding: make(chan struct{}),
		warn:     logsum.New(cfg.Logger, 0),
	}
	n.peers.init(n)
	n.initTrace()
	n.leases.init()

	ln, err := net.Listen("tcp", cfg.RPCAddr)
	if err != nil {
		return nil, fmt.Errorf("node: listen %s: %w", cfg.RPCAddr, err)
	}
	rpcAdvertise := advertised(ln.Addr().String(), cfg.RPCAdvertise)

	store, closer, err := n.newStore()
	if err != nil {
		ln.Close()
		return nil, err
	}
	n.store, n.closer = store, closer
	// The local store places keys by their ring hash: a call hashes its key
	// once, and a ring change finds the keys of the arcs that move.
	n.local = memstore.New(memstore.Config{MaxKeys: cfg.MaxKeys, MaxBytes: cfg.MaxBytes, Clock: cfg.Clock,
		TrackChanges: n.states != nil && cfg.WriteBehind > 0, Hash: ring.Hash})
	// A node given members to join decides nothing until it has seen them
	// (any key may be held elsewhere); with a store, a key that no member
	// holds is loaded from it before it starts here.
	n.own.init(cfg.Name, len(cfg.Join) > 0, n.states != nil, time.Now().UnixMilli())
	n.fresh = n.own.freshSince

	// Serve before joining: peers may forward as soon as they see us.
	n.server = peer.Serve(ln, peer.ServerConfig{
		Secret:   cfg.SecretKey,
		Accept:   cfg.SecretKeys,
		Name:     cfg.Name,
		Handler:  ownerHandler{n},
		Logger:   cfg.Logger,
		MaxConns: cfg.MaxPeerConns,
		Member:   n.memberIPs.Has,
	})

	rc, err := n.ringConfig(rpcAdvertise)
	if err != nil {
		n.server.Close()
		n.closeStore()
		return nil, err
	}
	if n.members, err = ring.NewMembership(rc); err != nil {
		n.server.Close()
		n.closeStore()
		return nil, fmt.Errorf("node: %w", err)
	}
	n.wg.Add(2)
	go n.run()
	go n.pushLoop()
	if len(cfg.Join) > 0 {
		// The ring resolves the Join names again and retries in the
		// background while the node is alone (ring.Config.Seeds).
		if _, err := n.members.JoinSeeds(context.Background()); err != nil {
			n.warn.Warn("join failed", "node: join failed; retrying in the background", "node", n.name, "err", err)
			if n.members.Ring().Len() <= 1 {
				n.alone() // nobody answered: the first member of its cluster
			}
		} else {
			// Joined: the ring follows in a moment. Callers of a node that
			// returned from New should find it.
			t := time.NewTimer(time.Second)
			select {
			case <-n.joined:
			case <-t.C:
			}
			t.Stop()
		}
	}
	return n, nil
}

func (n *Node) ringConfig(rpcAdvertise string) (ring.Config, error) {
	var rc ring.Config
	if n.cfg.Gossip == GossipFast {
		rc = ring.FastLocalConfig(n.name)
	} else {
		rc = ring.DefaultLANConfig(n.name)
	}
	bind, _ := splitHostPort(n.cfg.GossipAddr)
	rc.BindAddr, rc.BindPort = bind.host, bind.port
	if rc.BindAddr == "" {
		rc.BindAddr = "0.0.0.0"
	}
	if a := n.cfg.GossipAdvertise; a != "" {
		adv, _ := splitHostPort(a)
		rc.AdvertiseAddr, rc.AdvertisePort = adv.host, adv.port
	}
	rc.RPCAddr = rpcAdvertise
	rc.Incarnation = n.own.core.Inc
	rc.SecretKey, rc.SecretKeys = n.cfg.SecretKey, n.cfg.SecretKeys
	rc.Label = "ringlimit"
	rc.Logger = n.cfg.Logger
	rc.Seeds, rc.Resolve = n.cfg.Join, n.cfg.Resolve
	rc.OnChange = n.peers.update
	rc.Stalled = n.peers.stalled // a node that runs late does not drop members at once
	if nw := n.cfg.Network; nw != nil {
		rc.WrapTransport = func(_ string, t ring.Transport) ring.Transport { return nw.WrapGossip(n.name, t) }
	}
	return rc, nil
}

// advertised is the RPC address to publish: the explicit advertise address,
// else the bound one. A bind to every interface publishes only the port, and
// each peer dials it at the host it sees this node gossip from.
func advertised(bound, explicit string) string {
	if explicit != "" {
		return explicit
	}
	h, p, _ := net.SplitHostPort(bound)
	if ip := net.ParseIP(h); ip == nil || ip.IsUnspecified() {
		return net.JoinHostPort("", p)
	}
	return bound
}

// Name is the node's name.
func (n *Node) Name() string { return n.name }

// Members returns the names of the live members, this node included, sorted:
// the ring this node routes by (the membership's, less members that told
// it they leave).
func (n *Node) Members() []string { return n.routing().Members() }

// Owner returns the name of the member that owns key in the ring this node
// routes by.
func (n *Node) Owner(key string) string { return n.routing().Owner(key) }

// routing is the ring this node routes by: the core's view, or the
// membership's first ring (this node alone) until a view came.
func (n *Node) routing() *ring.Ring {
	if r := n.own.view.Load(); r.Len() > 0 {
		return r
	}
	return n.members.Ring()
}

// GossipAddr is the bound gossip address.
func (n *Node) GossipAddr() string { return n.members.BindAddr() }

// RPCAddr is the bound peer-forwarding address.
func (n *Node) RPCAddr() string { return n.server.Addr().String() }

// Close hands the state of every key this node holds to the key's next
// owner (calls on them go there from the moment Close begins), leaves the
// cluster gracefully, keeps redirecting the calls peers still send it until
// they stop (at most a second), stops the peer server, waits for every
// goroutine the node started and closes the store's client. Calls after it
// return ringlimit.ErrClosed. Calling it twice is safe.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		n.returnLeases()
		n.handOffAll()
		// Under GossipLAN the leave intent and memberlist's leave each take
		// about four 200 ms gossip rounds: a second was not enough, and Close
		// reported a leave that the others had seen. There, ring's default
		// (5 s); GossipFast's rounds are 20 ms, and a second is fifty of
		// them, stretched by how long this process is descheduled these
		// days (beside busy loops, memberlist's leave broadcast outlived
		// the half second it was left).
		leave := time.Second + 4*n.peers.lag.Recent(time.Now())
		if n.cfg.Gossip == GossipLAN {
			leave = 0
		}
		if err := n.members.Leave(leave); err != nil && !errors.Is(err, ringlimit.ErrClosed) {
			errs = append(errs, fmt.Errorf("node: leave: %w", err))
		}
		n.drainPeers()
		n.closed.Store(true)
		close(n.stop)
		n.server.Close()
		n.bgMu.Lock()
		n.bgOff = true
		n.bgMu.Unlock()
		n.bg.Wait()
		n.finishHandOff()
		n.wg.Wait()
		if err := n.members.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("node: shutdown: %w", err))
		}
		n.peers.closeAll()
		n.closeStore()
		n.warn.Flush(true) // the counts of every repeated warning not summarised yet
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// drainPeers waits until peers have sent no call for 100 ms, at most a
// second: the ones that have not seen this node leave yet are redirected
// rather than refused.
func (n *Node) drainPeers() {
	deadline := time.Now().Add(time.Second)
	last, quiet := n.stats.served.Load(), time.Now()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for now := range t.C {
		if s := n.stats.served.Load(); s != last {
			last, quiet = s, now
		}
		if now.Sub(quiet) >= 100*time.Millisecond || now.After(deadline) {
			return
		}
	}
}

// alone tells the core that no peer answered the Join addresses: the node
// decides alone until one joins.
func (n *Node) alone() {
	n.own.begin()
	n.own.core.Alone()
	n.own.end()
	n.decideOnce.Do(func() { close(n.deciding) })
}

func (n *Node) closeStore() {
	if n.closer != nil {
		n.closer()
	}
}
