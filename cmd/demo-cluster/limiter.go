package main

import "github.com/ringlimit/ringlimit"

// clusterNode is what a demo node process needs of its ringlimit node.
type clusterNode interface {
	ringlimit.Limiter
	Members() []string
	Owner(key string) string
	GossipAddr() string
	RPCAddr() string
	Stats() nodeStats
	Close() error
}

// nodeStats are a node's counters as /debug/ringlimit reports them.
type nodeStats struct {
	Decisions       [4]uint64 `json:"decisions"` // indexed by ringlimit.Source
	Forwards        uint64    `json:"forwards"`
	ForwardFailures uint64    `json:"forward_failures"`
	Served          uint64    `json:"served"`        // calls decided for peers
	Keys            int       `json:"keys"`          // keys held in local state: the keys it owns
	StoreBreaker    string    `json:"store_breaker"` // closed, open or half-open
}

// nodeConfig is what a node process is started with.
type nodeConfig struct {
	Name       string
	GossipAddr string
	RPCAddr    string
	Join       []string
	StoreAddr  string // "" for none
	SecretKey  []byte
}
