package node_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

func TestDbgClosed(t *testing.T) {
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, 4, func(cfg *node.Config) {
		cfg.Clock = clk
		cfg.ForwardTimeout = 5 * time.Second
	})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 100, Window: time.Hour}
	for _, nd := range c.Nodes {
		for i := range 5 {
			d, err := nd.Allow(ctx, "k"+string(rune('a'+i)), rule)
			t.Logf("%s k%d owner %s: %+v %v", nd.Name(), i, nd.Owner("k"+string(rune('a'+i))), d, err)
		}
		t.Logf("%s stats %+v", nd.Name(), nd.Stats())
	}
}

func TestDbgLoad(t *testing.T) {
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, 4, func(cfg *node.Config) {
		cfg.Clock = clk
		cfg.ForwardTimeout = 5 * time.Second
	})
	keys, rules := handoffKeys(30, 100)
	l := startLoad(t, c.Nodes, keys, rules, 16)
	l.moreCalls(3000)
	l.finish()
	for _, nd := range c.Nodes {
		t.Logf("%s stats %+v", nd.Name(), nd.Stats().Decisions)
	}
}
