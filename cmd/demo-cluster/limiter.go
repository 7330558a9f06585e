package main

import (
	"encoding/json"

	"github.com/ringlimit/ringlimit"
)

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
	Decisions       sourceCounts      `json:"decisions"` // indexed by ringlimit.Source
	Forwards        uint64            `json:"forwards"`
	ForwardFailures uint64            `json:"forward_failures"`
	Served          uint64            `json:"served"`        // calls decided for peers
	Keys            int               `json:"keys"`          // keys held in local state: the keys it owns
	StoreBreaker    string            `json:"store_breaker"` // closed, open or half-open
	PeerBreakers    map[string]string `json:"peer_breakers"` // peer name → its breaker's state
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

// sourceCounts are counts by ringlimit.Source, in JSON an object keyed by the
// sources' names: {"local": 5, "peer": 2, "store": 0, "fallback": 0}.
type sourceCounts [4]uint64

func (c sourceCounts) MarshalJSON() ([]byte, error) {
	m := make(map[string]uint64, len(c))
	for i, n := range c {
		m[ringlimit.Source(i).String()] = n
	}
	return json.Marshal(m)
}

func (c *sourceCounts) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for i := range c {
		c[i] = m[ringlimit.Source(i).String()]
	}
	return nil
}
