package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/logsum"
)

// ErrNotConnected is returned by a Connector whose client does not exist yet
// because the server has not answered.
var ErrNotConnected = errors.New("remote: not connected")

// ConnectConfig configures Connect.
type ConnectConfig struct {
	// Retry is the first wait between attempts to create the client; it
	// doubles up to 5 s. If zero, 250 ms.
	Retry time.Duration
	// Logger receives the connection's events. If nil, nothing is logged.
	Logger *slog.Logger
	// ShardRefresh is how often a cluster client's slot map is read again
	// for Shard (after a failover a slot's master changes). If zero, 1 s.
	// Unused when the server is not a cluster.
	ShardRefresh time.Duration
}

// Connector is a Limiter whose valkey-go client is created in the
// background: valkey.NewClient fails at once while the server is down, but a
// service must start all the same. Until the client exists every call returns
// ErrNotConnected, which a failover.Limiter in front counts as a store
// failure; after that, it is the Limiter of New. Once created, the client
// reconnects by itself. On a cluster it keeps reading the slot map for Shard.
//
// Connector is safe for simultaneous use by multiple goroutines.
type Connector struct {
	lim    atomic.Pointer[Limiter]
	client valkey.Client // set with lim
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

var _ ringlimit.Limiter = (*Connector)(nil)

// Connect starts creating a client for o in the background and returns at
// once. With a single address (and o.Cluster unset) it first asks the
// server whether it runs in cluster mode, and if so connects as a cluster
// client instead: one seed of a Valkey Cluster is enough. Close stops it.
// o.DialTimeout (1 s if zero) bounds how long Close waits for an attempt in
// flight.
func Connect(o Options, c Config, cc ConnectConfig) *Connector {
	if cc.Retry <= 0 {
		cc.Retry = 250 * time.Millisecond
	}
	if cc.Logger == nil {
		cc.Logger = slog.New(slog.DiscardHandler)
	}
	k := &Connector{stop: make(chan struct{}), done: make(chan struct{})}
	go k.run(o.client(), c, cc)
	return k
}

func (k *Connector) run(opt valkey.ClientOption, c Config, cc ConnectConfig) {
	defer close(k.done)
	// While the store stays down the warning repeats every 5 s at most:
	// one line per interval, then a summary with the count.
	sum := logsum.New(cc.Logger, 0)
	defer sum.Flush(true)
	wait := cc.Retry
	for {
		client, err := valkey.NewClient(opt)
		if err == nil && opt.ForceSingleClient && len(opt.InitAddress) == 1 && clusterEnabled(client) {
			// One seed of a Valkey Cluster: connect as a cluster client,
			// which finds the other masters.
			client.Close()
			opt.ForceSingleClient = false
			client, err = valkey.NewClient(opt)
		}
		if err == nil {
			k.client = client
			l := New(client, c)
			k.lim.Store(l)
			sum.Flush(true)
			cc.Logger.Info("remote: connected", "addrs", opt.InitAddress, "mode", client.Mode())
			if client.Mode() == valkey.ClientModeCluster {
				k.refreshShards(l, cc)
			}
			return
		}
		sum.Warn("connect retry", "remote: cannot connect yet; retrying", "addrs", opt.InitAddress, "err", err, "in", wait)
		select {
		case <-k.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// refreshShards reads the cluster's slot map now and every
// cc.ShardRefresh until Close.
func (k *Connector) refreshShards(l *Limiter, cc ConnectConfig) {
	every := cc.ShardRefresh
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		if err := l.RefreshShards(ctx); err != nil {
			cc.Logger.Warn("remote: cannot read the cluster's slots", "err", err)
		}
		cancel()
		select {
		case <-k.stop:
			return
		case <-t.C:
		}
	}
}

// clusterEnabled reports whether the server behind a single client runs in
// cluster mode (INFO cluster says cluster_enabled:1).
func clusterEnabled(c valkey.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Do(ctx, c.B().Info().Section("cluster").Build()).ToString()
	return err == nil && strings.Contains(info, "cluster_enabled:1")
}

// Shard is the Limiter's Shard: the address of the cluster master that
// serves key, or "" (not connected yet, or not a cluster).
func (k *Connector) Shard(key string) string {
	if l := k.lim.Load(); l != nil {
		return l.Shard(key)
	}
	return ""
}

// Connected reports whether the client exists.
func (k *Connector) Connected() bool { return k.lim.Load() != nil }

func (k *Connector) limiter() (*Limiter, error) {
	if l := k.lim.Load(); l != nil {
		return l, nil
	}
	return nil, ErrNotConnected
}

// AllowN is the Limiter's AllowN, or ErrNotConnected (after validating the
// input, so bad input is still reported as bad input).
func (k *Connector) AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	l, err := k.limiter()
	if err != nil {
		if verr := ringlimit.ValidateCall(key, rule, n); verr != nil {
			return ringlimit.Decision{}, verr
		}
		return ringlimit.Decision{}, fmt.Errorf("remote: eval %s: %w", rule.Algorithm, err)
	}
	return l.AllowN(ctx, key, rule, n)
}

// Peek is the Limiter's Peek, or ErrNotConnected.
func (k *Connector) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return k.AllowN(ctx, key, rule, 0)
}

// Reset is the Limiter's Reset, or ErrNotConnected.
func (k *Connector) Reset(ctx context.Context, key string) error {
	l, err := k.limiter()
	if err != nil {
		if verr := ringlimit.ValidateKey(key); verr != nil {
			return verr
		}
		return fmt.Errorf("remote: del: %w", err)
	}
	return l.Reset(ctx, key)
}

// Close stops connecting (and reading a cluster's slot map), waits for the
// background goroutine and closes the client. Idempotent.
func (k *Connector) Close() error {
	k.once.Do(func() {
		close(k.stop)
		<-k.done
		if k.client != nil {
			k.client.Close()
		}
	})
	return nil
}
