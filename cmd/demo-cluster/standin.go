package main

// STAND-IN until package node is merged: gossip membership (ring) and a local
// limiter, without forwarding or a store. Every node decides alone (Source
// Local), so the cluster does not enforce one limit. Replaced by node.go.

import (
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"

	"context"
	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/ring"
)

type standinNode struct {
	*local.Limiter
	m         *ring.Membership
	decisions atomic.Uint64
}

func newClusterNode(c nodeConfig, log *slog.Logger) (clusterNode, error) {
	rc := ring.FastLocalConfig(c.Name)
	host, port, _ := net.SplitHostPort(c.GossipAddr)
	rc.BindAddr = host
	rc.BindPort, _ = strconv.Atoi(port)
	rc.SecretKey = c.SecretKey
	rc.RPCAddr = c.RPCAddr
	rc.Logger = log
	m, err := ring.NewMembership(rc)
	if err != nil {
		return nil, err
	}
	if len(c.Join) > 0 {
		m.Join(c.Join)
	}
	return &standinNode{Limiter: local.New(local.Config{}), m: m}, nil
}

func (s *standinNode) AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	d, err := s.Limiter.AllowN(ctx, key, rule, n)
	if err == nil {
		s.decisions.Add(1)
	}
	return d, err
}
func (s *standinNode) Members() []string       { return s.m.Ring().Members() }
func (s *standinNode) Owner(key string) string { return s.m.Ring().Owner(key) }
func (s *standinNode) GossipAddr() string      { return s.m.GossipAddr() }
func (s *standinNode) RPCAddr() string         { return "" }
func (s *standinNode) Stats() nodeStats {
	return nodeStats{Decisions: [4]uint64{s.decisions.Load()}, Keys: s.Limiter.Stats().Keys}
}
func (s *standinNode) Close() error {
	s.m.Leave(0)
	return s.m.Shutdown()
}
