package node

import (
	"sync/atomic"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/local"
)

type counters struct {
	decisions       [4]paddedCounter // by ringlimit.Source
	forwards        atomic.Uint64
	forwardFailures atomic.Uint64
	served          atomic.Uint64
}

// paddedCounter keeps each hot counter on its own cache line.
type paddedCounter struct {
	atomic.Uint64
	_ [56]byte
}

func (c *counters) decided(s ringlimit.Source) {
	if int(s) < len(c.decisions) {
		c.decisions[s].Add(1)
	}
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
	// Store is the store breaker's and fallback policy's counters.
	Store failover.Stats
	// Local is the owned keys' store.
	Local local.Stats
}

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	s := Stats{
		Forwards:        n.stats.forwards.Load(),
		ForwardFailures: n.stats.forwardFailures.Load(),
		Served:          n.stats.served.Load(),
		Peers:           n.peers.states(),
		Store:           n.store.Stats(),
		Local:           n.local.Stats(),
	}
	for i := range s.Decisions {
		s.Decisions[i] = n.stats.decisions[i].Load()
	}
	return s
}
