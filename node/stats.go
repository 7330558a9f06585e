package node

import (
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/local"
)

type counters struct {
	forwards        atomic.Uint64
	forwardFailures atomic.Uint64
	served          atomic.Uint64

	redirects, pulls, handedOff, received, handoffFailures atomic.Uint64
	writes, writeFailures, drops, loads, loadFailures      atomic.Uint64
	badHold, reroutes                                      atomic.Uint64
	ownerWaitsExpired                                      atomic.Uint64
}

// paddedCounter keeps each hot counter on its own cache line.
type paddedCounter struct {
	atomic.Uint64
	_ [56]byte
}

// Stats are a node's counters.
type Stats struct {
	// Decisions counts the decisions returned to this node's callers, by
	// ringlimit.Source: Decisions[ringlimit.Peer] were made by owning peers.
	Decisions [4]uint64
	// Forwards counts calls sent to owning peers; ForwardFailures those that
	// got no answer (or were not sent: the peer's breaker was open) and went
	// to the store.
	Forwards, ForwardFailures uint64
	// Served counts calls this node decided for its peers.
	Served uint64
	// Peers is the state of each peer connection's breaker.
	Peers map[string]failover.State
	// PeerTimeouts is the effective timeout of a call forwarded to each
	// peer: the RTO of its latencies, at least 50 ms (or half of
	// ForwardTimeout, if more) plus Lag, at most
	// ForwardTimeout (that ceiling for a member not dialled yet). The
	// store's are in Store (Timeout, and each shard's in Store.Shards).
	PeerTimeouts map[string]time.Duration
	// Lag is how long this node has been descheduled at a stretch lately
	// (the largest lateness of its own 10 ms timer over the last 5 s): a CPU
	// quota, a busy host or a GC pause. Timeouts leave room for it.
	Lag time.Duration
	// Store is the store breaker's and fallback policy's counters.
	Store failover.Stats
	// Local is the owned keys' store.
	Local local.Stats

	// Hand-off. HandedOff counts key states this node gave to their new
	// owners (pushed on join or leave, or taken by a pull); Received the
	// states it installed from others; Pulls the states it asked a previous
	// owner for; HandoffFailures the states a push could not deliver (taken
	// back on a join; written to the store, if any, on a leave). Redirects
	// counts calls that went on to a key's new holder after a "moved" answer;
	// Reroutes the calls that went down the chain again (they bounced past
	// the bound between members whose views disagreed, or the member asked
	// left on the way).
	HandedOff, Received, Pulls, HandoffFailures, Redirects, Reroutes uint64
	// OwnerWaitsEnded counts the calls that, with Config.OwnerWait, waited
	// for a slow owner until their context ended (they returned its error,
	// and went to no store nor policy).
	OwnerWaitsEnded uint64

	// Write-behind. Writes counts states written to the store; WriteFailures
	// the pipelined writes that failed (their states stay queued);
	// WriteDrops the states dropped because the queue was full. Loads
	// counts states looked up in the store on ownership gain, LoadFailures
	// the lookups the store did not answer.
	Writes, WriteFailures, WriteDrops, Loads, LoadFailures uint64
	// StaleWrites counts writes the store dropped because it held a newer
	// version of the key's state (a late write-behind of a key that moved on:
	// fenced, see remote.KeyState.Ver).
	StaleWrites uint64
	// StaleCancels counts the store tier's waiters' cancels that gave
	// nothing back: the key's state in the store was not the one their
	// hits were reserved in (remote.Limiter.StaleCancels). The cancels this
	// node's own state dropped are in Local.StaleCancels.
	StaleCancels uint64

	// Peer is the peer link's counters.
	Peer PeerStats

	// Leases is the hot keys' leases: held of other members' keys, and lent.
	Leases LeaseStats

	// Changing is true while the node leaves, a pull is on its way, or a
	// ring change of the last HandoffWindow is not resolved yet by the Done
	// of every member of the view: keys may still change hands. (Its owned
	// keys without a state here take a slower path while any change is
	// unresolved, which makes sure their state is not elsewhere before
	// deciding.)
	Changing bool
	// Sources is the ring changes not resolved yet; Resolved counts those
	// resolved by every member's Done, and Settled those of them settled
	// by asking every member for its word, twice (their Done waited on
	// each other: see settle.go). Marks is the keys this node gave away
	// whose marks it keeps (it sends their calls on); MarksDropped counts
	// those dropped past the bound. BadHandoffs counts hand-off messages
	// from peers that did not parse (refused whole).
	Sources, Marks                  int
	Resolved, Settled, MarksDropped uint64
	BadHandoffs                     uint64
}

// PeerStats are the peer link's counters: the listener's connections and
// refusals, and the frames rejected in either direction.
type PeerStats struct {
	// Conns is the authenticated peer connections open on the listener;
	// Handshakes those still in the handshake.
	Conns, Handshakes int64
	// Refused counts the connections the listener closed, by cause:
	// RefusedCap over MaxPeerConns and RefusedHandshake over the cap on
	// connections in the handshake (both before reading anything),
	// RefusedAuth failed or timed out in the handshake.
	RefusedCap, RefusedHandshake, RefusedAuth uint64
	// RejectedFrames counts received records that failed to open (modified,
	// replayed, dropped before, reordered: only someone on the path without
	// the secret, or a fault, does that) or to parse, on the listener's
	// connections and on this node's connections to its peers. Each closed
	// its connection; the calls in flight on it went to the store.
	RejectedFrames uint64
	// BadCalls counts forwarded calls that parsed but asked what no rule
	// can (a peer of another release, or a fault): each was answered
	// ErrInvalidRule, and its connection kept.
	BadCalls uint64
	// BodyTimeouts counts connections closed because a record stalled
	// after its first byte; IdleClosed those closed for idleness.
	BodyTimeouts, IdleClosed uint64
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	s := Stats{
		Forwards:        n.stats.forwards.Load(),
		ForwardFailures: n.stats.forwardFailures.Load(),
		Served:          n.stats.served.Load(),
		Peers:           n.peers.states(),
		PeerTimeouts:    n.peers.timeouts(),
		Lag:             n.peers.lag.Recent(time.Now()),
		Store:           n.store.Stats(),
		Local:           n.local.Stats(),
		HandedOff:       n.stats.handedOff.Load(),
		Received:        n.stats.received.Load(),
		Pulls:           n.stats.pulls.Load(),
		HandoffFailures: n.stats.handoffFailures.Load(),
		Redirects:       n.stats.redirects.Load(),
		Reroutes:        n.stats.reroutes.Load(),
		OwnerWaitsEnded: n.stats.ownerWaitsExpired.Load(),
		Writes:          n.stats.writes.Load(),
		WriteFailures:   n.stats.writeFailures.Load(),
		WriteDrops:      n.stats.drops.Load(),
		Loads:           n.stats.loads.Load(),
		LoadFailures:    n.stats.loadFailures.Load(),
		BadHandoffs:     n.stats.badHold.Load(),
		Leases:          n.leaseStats(),
	}
	if sw, ok := n.states.(interface{ StaleWrites() uint64 }); ok {
		s.StaleWrites = sw.StaleWrites()
	}
	if sc, ok := n.states.(interface{ StaleCancels() uint64 }); ok {
		s.StaleCancels = sc.StaleCancels()
	}
	n.own.mu.Lock()
	s.Changing = n.changingLocked()
	s.Sources, s.Marks = n.own.core.Sources(), n.own.core.Marks()
	s.Resolved, s.Settled, s.MarksDropped = n.own.core.Resolved, n.own.core.Settles, n.own.core.MarksDropped
	n.own.mu.Unlock()
	ps := n.server.Stats()
	s.Peer = PeerStats{Conns: ps.Conns, Handshakes: ps.Handshakes, RefusedCap: ps.RefusedCap,
		RefusedHandshake: ps.RefusedHandshakes, RefusedAuth: ps.RefusedAuth,
		RejectedFrames: ps.RejectedFrames + n.peers.rejected(),
		BodyTimeouts:   ps.BodyTimeouts, IdleClosed: ps.IdleClosed, BadCalls: ps.BadCalls}
	for i := range s.Decisions {
		for r := range n.obs.counts[i] {
			s.Decisions[i] += n.obs.counts[i][r].Load()
		}
	}
	return s
}
