package node

import (
	"context"
	"sync"

	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
)

// newStore builds the store tier: the central store behind a breaker, with
// the fallback policy. Without a store, the policy alone. It also starts
// the node's measure of its own scheduling lag, which the store's and the
// peers' timeouts follow: the closer it returns stops it.
func (n *Node) newStore() (*failover.Limiter, func() error, error) {
	cfg := n.cfg
	primary := cfg.Store
	var closer func() error
	lag, stopLag := startLag()
	n.peers.lag = lag

	if primary == nil && (len(cfg.ValkeyAddrs) > 0 || cfg.ValkeyOptions != nil) {
		opt := remote.Options{Addrs: cfg.ValkeyAddrs}
		if cfg.ValkeyOptions != nil {
			opt = *cfg.ValkeyOptions
		}
		// The client is made in the background: the node starts while the
		// store is down, and the store tier counts as down until it is up.
		conn := remote.Connect(opt, remote.Config{Prefix: cfg.ValkeyPrefix}, remote.ConnectConfig{Logger: cfg.Logger})
		primary, closer = conn, conn.Close
	}
	if ss, ok := primary.(stateStore); ok {
		n.states = ss
	}
	fc := failover.Config{
		Timeout: cfg.StoreTimeout,
		Lag:     lag,
		Policy:  cfg.Policy,
		Logger:  cfg.Logger,
		Share:   func() int { return n.members.Ring().Len() },
		OnStateChange: func(from, to failover.State) {
			n.warn.Warn("store breaker", "node: store breaker", "node", n.name, "from", from.String(), "to", to.String())
		},
	}
	if sh, ok := primary.(interface{ Shard(key string) string }); ok {
		// A Valkey Cluster: one breaker per master, so a dead master sends
		// only its own slots' keys to the policy.
		fc.Shard = sh.Shard
	}
	if cfg.Policy == failover.LocalShare {
		fc.Local = local.New(local.Config{MaxKeys: cfg.MaxKeys, Clock: cfg.Clock})
	}
	storeCloser := closer
	closer = func() error {
		stopLag()
		if storeCloser != nil {
			return storeCloser()
		}
		return nil
	}
	return failover.New(primary, fc), closer, nil
}

// startLag starts the goroutine that measures how long this process is
// descheduled (failover.Lag: the lateness of a 10 ms timer); stop ends it
// and waits for it.
func startLag() (lag *failover.Lag, stop func()) {
	lag = new(failover.Lag)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		lag.Run(ctx, failover.DefaultLagInterval)
	}()
	var once sync.Once
	return lag, func() { once.Do(func() { cancel(); <-done }) }
}
