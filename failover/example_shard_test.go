package failover_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
)

// halfDown is a store of two shards, "eu" and "us", whose "us" part is down.
type halfDown struct{}

func (halfDown) AllowN(_ context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if strings.HasPrefix(key, "us:") {
		return ringlimit.Decision{}, errDown
	}
	return ringlimit.Decision{Allowed: true, Limit: rule.Limit, Remaining: rule.Limit - n, Source: ringlimit.Store}, nil
}
func (s halfDown) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return s.AllowN(ctx, key, rule, 0)
}
func (halfDown) Reset(context.Context, string) error { return nil }

// One breaker per shard (for a Valkey Cluster, Shard is
// remote.Limiter.Shard): the failed shard's keys go to the policy, the
// other shard's are still decided by the store.
func ExampleConfig_shard() {
	l := failover.New(halfDown{}, failover.Config{
		Shard: func(key string) string { return key[:2] },
	})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 100, Window: time.Minute}
	for range 10 { // opens the us breaker
		l.AllowN(context.Background(), "us:1", rule, 1)
	}
	eu, _ := l.AllowN(context.Background(), "eu:1", rule, 1)
	us, _ := l.AllowN(context.Background(), "us:1", rule, 1)
	fmt.Println("eu:", eu.Source, "us:", us.Source)
	for _, s := range l.Stats().Shards {
		fmt.Printf("shard %q: %s\n", s.Shard, s.State)
	}
	// Output:
	// eu: store us: fallback
	// shard "": closed
	// shard "eu": closed
	// shard "us": open
}
