package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/remote"
	"github.com/ringlimit/ringlimit/ring"
)

// GossipPreset chooses the gossip timings.
type GossipPreset uint8

const (
	// GossipLAN: memberlist's LAN timings. A killed member is noticed in a
	// few seconds. The zero value.
	GossipLAN GossipPreset = iota
	// GossipFast: for tests and small local clusters: a killed member is
	// noticed in about half a second, at the cost of more gossip traffic.
	GossipFast
)

// Config configures a Node. Name is required; every other zero value has a
// documented default.
type Config struct {
	// Name identifies the node in the cluster; it must be unique.
	Name string
	// GossipAddr is the host:port memberlist binds. If empty,
	// "0.0.0.0:7946"; port 0 picks a free port.
	GossipAddr string
	// GossipAdvertise is the host:port other nodes use to reach the gossip
	// listener (for NAT and containers). If empty, the bound address.
	GossipAdvertise string
	// RPCAddr is the host:port of the peer-forwarding listener. If empty,
	// "0.0.0.0:7947"; port 0 picks a free port.
	RPCAddr string
	// RPCAdvertise is the host:port other nodes use to reach the peer
	// listener. If empty, the bound address; when that is every interface
	// (0.0.0.0 or ::), the peers use the host they see this node gossip from.
	RPCAdvertise string
	// Join lists gossip addresses of nodes to join, host:port, where host
	// may be a DNS name that resolves to many addresses (a Kubernetes
	// headless Service). If none answers, New still succeeds. While the
	// node is alone, or has lost members (a partition, or peers that
	// restarted elsewhere), it resolves the names again and joins the
	// addresses it does not know, every second (GossipFast: 250 ms), so a
	// cluster whose every node restarted at once forms again.
	Join []string
	// Resolve returns the addresses of a Join entry's host name: IP
	// addresses (joined at the entry's port) or host:port pairs. It must
	// return when ctx is done. If nil, net.DefaultResolver's LookupHost.
	Resolve func(ctx context.Context, name string) ([]string, error)
	// ValkeyAddrs are the central store's addresses. If empty (and Store and
	// ValkeyOptions are nil), there is no store: keys whose owner cannot be
	// reached are decided by Policy. One address of a single server, or any
	// one or more masters of a Valkey Cluster (seeds): the client finds the
	// other masters itself, and the node keeps one store breaker per master,
	// so a dead master sends only its own slots' keys to Policy. For
	// Sentinel, or for TLS and AUTH, give ValkeyOptions instead.
	ValkeyAddrs []string
	// ValkeyOptions, if not nil, say how to reach the central store with
	// AUTH, TLS or Sentinel (see remote.Options); they take the place of
	// ValkeyAddrs.
	ValkeyOptions *remote.Options
	// ValkeyPrefix is put before every key in Valkey. If empty, "rl:".
	ValkeyPrefix string
	// Store, if not nil, is the central store instead of a Valkey client
	// made from ValkeyAddrs: any ringlimit.Limiter that every node shares.
	Store ringlimit.Limiter
	// SecretKey (16, 24 or 32 bytes) encrypts gossip, authenticates peer
	// connections and seals every frame on them (AES-256-GCM under keys
	// derived per connection and direction). If empty, none of these: New
	// logs a warning (for demos only).
	SecretKey []byte
	// SecretKeys lists other secrets this node accepts, for rotating the
	// secret without stopping the cluster: gossip sealed under any of them
	// is read, and a peer proving any of them is let in (its connection is
	// then sealed under that one). This node still sends gossip and dials
	// peers with SecretKey alone. To rotate from old to new, roll every
	// node, one by one, through SecretKey old with SecretKeys [new], then
	// SecretKey new with SecretKeys [old], then new alone; at every step
	// each node accepts what every other sends. Each must be 16, 24 or 32
	// bytes, and SecretKey must be set. If empty, SecretKey only.
	SecretKeys [][]byte
	// Policy decides when neither the owner nor the store can answer. The
	// zero value is failover.Open: allow.
	Policy failover.Policy
	// Clock tells the time for decisions made here. If nil, the system
	// clock.
	Clock ringlimit.Clock
	// Logger receives the node's events. If nil, nothing is logged.
	Logger *slog.Logger
	// Gossip chooses the gossip timings. The zero value is GossipLAN.
	Gossip GossipPreset
	// ForwardTimeout is the ceiling of a call forwarded to a peer, and
	// bounds the dial and handshake of its connection. Each call waits the
	// peer's effective timeout: the RTO of the latencies it has shown
	// (SRTT + 4·RTTVAR, RFC 6298), at least 50 ms or half of
	// ForwardTimeout, whichever is more (a forwarded call may wait on the
	// owner's hand-off pull, up to a third of it), plus this node's
	// scheduling lag (Stats.Lag), doubled after each timeout until the next
	// answer, at most ForwardTimeout (the ceiling until the first answer).
	// Time this node spent descheduled during the call does not count
	// against the peer: the call waits that much longer (at most its timeout
	// more, 100 ms at least).
	// The caller's context deadline, if sooner, always wins. If zero, 50 ms.
	ForwardTimeout time.Duration
	// OwnerWait, if positive, prefers exactness to latency: a call whose
	// owner is alive in this node's view but does not answer in time (a
	// slow, starved or paused owner, or one cut off from this node alone)
	// is asked again, down the chain, until the caller's context ends
	// (its error is then returned), or for OwnerWait if the context has no
	// deadline, instead of going to the store tier at once (which decides
	// from what the owner last wrote behind, or by Policy when the store
	// is out too: an overloaded cluster then admits what the owner also
	// admits). An owner the view drops (dead, or its port refused) still
	// sends its keys' calls to the store. If zero, a call goes to the store
	// tier once its forward timed out (and went down the chain again for a
	// moment: see Stats.Reroutes).
	OwnerWait time.Duration
	// StoreTimeout is the ceiling of a call to the store, each store shard
	// with its own effective timeout, as for ForwardTimeout. If zero, 50 ms.
	StoreTimeout time.Duration
	// MaxKeys bounds the keys this node holds for the keys it owns. If
	// zero, 1<<20.
	MaxKeys int
	// MaxBytes bounds the memory those keys hold: key strings, states and
	// sliding-log stamps (local.Config.MaxBytes: about 88 bytes a key plus
	// the key). If zero, 256 MiB.
	MaxBytes int64
	// MaxPeerConns bounds the authenticated peer connections this node's
	// listener accepts; beyond it a connection is closed at once, before
	// anything is read (counted in Stats().Peer.RefusedCap). Each peer
	// opens one connection for forwarded calls and, during a hand-off, one
	// more. If zero, 1024: a full mesh of a 1,000-node cluster's forwarding
	// connections, with room for hand-offs in flight.
	MaxPeerConns int
	// Network, if not nil, carries the node's traffic instead of the
	// operating system's (package nodetest has one with faults).
	Network Network
	// WriteBehind is how often the states of owned keys changed since the
	// last write are written to the store (pipelined, with TTLs, in the
	// representation the store's scripts use), so that peers that fall back
	// to the store for a crashed owner's keys, and the keys' new owners,
	// continue from them. It needs a Valkey store (or a Store with
	// WriteStates and LoadState). If zero, 100 ms; if negative, never.
	WriteBehind time.Duration
	// WriteBehindQueue bounds the states waiting for a slow or down store;
	// beyond it the oldest are dropped (counted in Stats). If zero, 65536.
	WriteBehindQueue int
	// HandoffWindow bounds two waits of a node that joins a cluster: Ready
	// is true at the latest this long after New even if a member never
	// says Done for the change it joined with, and a node whose Join
	// addresses answered but which sees no peer this long decides alone.
	// (Ownership changes themselves wait for no timer: see internal/hold.)
	// If zero, 10 s.
	HandoffWindow time.Duration
	// LeaseHot is how many calls of one key this node forwards in a second
	// before it asks the key's holder for a lease, and decides the key's
	// calls from the lease in its own memory (see the package docs). If
	// zero, 32; if negative, this node asks for none (it still grants them
	// to peers that ask).
	LeaseHot int
}

// Network is what the node uses to reach its peers. Tests put faults in it.
type Network interface {
	// DialPeer dials the RPC address of the peer named to, for the node
	// named from.
	DialPeer(ctx context.Context, from, to, addr string) (net.Conn, error)
	// WrapGossip wraps the gossip transport of the node named from.
	WrapGossip(from string, t ring.Transport) ring.Transport
}

const (
	defaultGossipAddr = "0.0.0.0:7946"
	defaultRPCAddr    = "0.0.0.0:7947"
	defaultTimeout    = 50 * time.Millisecond
)

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" || len(c.Name) > 255 {
		return c, fmt.Errorf("node: config: Name %q: want 1 to 255 bytes", c.Name)
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return c, fmt.Errorf("node: config: SecretKey of %d bytes: want 16, 24 or 32", len(c.SecretKey))
	}
	if len(c.SecretKeys) > 0 && len(c.SecretKey) == 0 {
		return c, fmt.Errorf("node: config: SecretKeys without a SecretKey: a rotation needs a secret to send")
	}
	for i, k := range c.SecretKeys {
		switch len(k) {
		case 16, 24, 32:
		default:
			return c, fmt.Errorf("node: config: SecretKeys[%d] of %d bytes: want 16, 24 or 32", i, len(k))
		}
	}
	if c.GossipAddr == "" {
		c.GossipAddr = defaultGossipAddr
	}
	if c.RPCAddr == "" {
		c.RPCAddr = defaultRPCAddr
	}
	for _, a := range []string{c.GossipAddr, c.RPCAddr} {
		if _, err := splitHostPort(a); err != nil {
			return c, fmt.Errorf("node: config: %w", err)
		}
	}
	for _, a := range []string{c.GossipAdvertise, c.RPCAdvertise} {
		if a == "" {
			continue
		}
		if _, err := splitHostPort(a); err != nil {
			return c, fmt.Errorf("node: config: advertise: %w", err)
		}
	}
	if c.ForwardTimeout <= 0 {
		c.ForwardTimeout = defaultTimeout
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = defaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.WriteBehind == 0 {
		c.WriteBehind = 100 * time.Millisecond
	}
	if c.WriteBehindQueue <= 0 {
		c.WriteBehindQueue = 1 << 16
	}
	if c.MaxPeerConns <= 0 {
		c.MaxPeerConns = 1024
	}
	if c.LeaseHot == 0 {
		c.LeaseHot = leaseHot
	}
	if c.HandoffWindow <= 0 {
		c.HandoffWindow = 10 * time.Second
	}
	return c, nil
}

type hostPort struct {
	host string
	port int
}

func splitHostPort(a string) (hostPort, error) {
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		return hostPort{}, fmt.Errorf("address %q: %w", a, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return hostPort{}, fmt.Errorf("address %q: bad port", a)
	}
	if h != "" && net.ParseIP(h) == nil {
		return hostPort{}, fmt.Errorf("address %q: host is not an IP address", a)
	}
	return hostPort{h, port}, nil
}
