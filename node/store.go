package node

import (
	"fmt"

	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/local"
)

// newStore builds the store tier: the central store behind a breaker, with
// the fallback policy. Without a store, the policy alone.
func (n *Node) newStore() (*failover.Limiter, func() error, error) {
	cfg := n.cfg
	primary := cfg.Store
	var closer func() error
	if primary == nil && len(cfg.ValkeyAddrs) > 0 {
		return nil, nil, fmt.Errorf("node: config: ValkeyAddrs needs package remote, which is not in this build yet; set Store")
	}
	fc := failover.Config{
		Timeout: cfg.StoreTimeout,
		Policy:  cfg.Policy,
		Logger:  cfg.Logger,
		Share:   func() int { return n.members.Ring().Len() },
		OnStateChange: func(from, to failover.State) {
			cfg.Logger.Warn("node: store breaker", "node", n.name, "from", from.String(), "to", to.String())
		},
	}
	if cfg.Policy == failover.LocalShare {
		fc.Local = local.New(local.Config{MaxKeys: cfg.MaxKeys, Clock: cfg.Clock})
	}
	return failover.New(primary, fc), closer, nil
}
