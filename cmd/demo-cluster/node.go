package main

import (
	"log/slog"

	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/node"
)

// realNode adapts *node.Node to clusterNode.
type realNode struct{ *node.Node }

var _ clusterNode = realNode{}

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
