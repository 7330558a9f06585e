package main

import (
	"log/slog"
	"time"

	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/node"
)

// realNode adapts *node.Node to clusterNode.
type realNode struct{ *node.Node }

var _ clusterNode = realNode{}

// demoTimeout is the demo nodes' forward and store timeout ceiling. Under a
// CPU quota (a Kubernetes limit of 250m: 25 ms per 100 ms period) a node is
// descheduled up to 75 ms at a stretch, and no timeout below that tells an
// owner that is throttled from one that hangs: at the default 50 ms, the
// demo at a quarter CPU sent 90 of 7,000 decisions to the store and 5 to
// fail-open, each timed-out forward being decided twice. A ceiling is only
// what a call may wait at most: the effective timeout stays at 50 ms plus
// the node's own lag until a peer's answers come late.
const demoTimeout = 250 * time.Millisecond

func newClusterNode(c nodeConfig, log *slog.Logger) (clusterNode, error) {
	cfg := node.Config{
		Name:       c.Name,
		GossipAddr: c.GossipAddr,
		RPCAddr:    c.RPCAddr,
		Join:       c.Join,
		SecretKey:  c.SecretKey,
		Policy:     failover.Open,
		Logger:     log,
		Gossip:     node.GossipFast,

		ForwardTimeout: demoTimeout,
		StoreTimeout:   demoTimeout,
	}
	if c.StoreAddr != "" {
		cfg.ValkeyAddrs = []string{c.StoreAddr}
	}
	n, err := node.New(cfg)
	if err != nil {
		return nil, err
	}
	return realNode{n}, nil
}

func (n realNode) Stats() nodeStats {
	s := n.Node.Stats()
	peers := make(map[string]string, len(s.Peers))
	for name, st := range s.Peers {
		peers[name] = st.String()
	}
	return nodeStats{Decisions: s.Decisions, Forwards: s.Forwards, ForwardFailures: s.ForwardFailures,
		Served: s.Served, Keys: s.Local.Keys, StoreBreaker: s.Store.State.String(), PeerBreakers: peers}
}
