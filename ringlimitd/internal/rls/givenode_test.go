package rls

import (
	"context"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/ringlimitd/internal/config"
)

// refusingNode is a node whose refuse-th AllowN is refused after its peek
// said yes: another request took the last hits in between.
type refusingNode struct {
	*node.Node
	calls, refuse int
}

func (r *refusingNode) AllowN(ctx context.Context, k string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	r.calls++
	if r.calls == r.refuse {
		return ringlimit.Decision{Limit: rule.Limit, Source: ringlimit.Local}, nil
	}
	return r.Node.AllowN(ctx, k, rule, n)
}

// TestRefusedRequestChargesNothingOnNodes: on a cluster, a request refused
// at its last charge gives back the charges before it, whichever member
// holds their keys and whatever their algorithms (two leaky buckets, two
// sliding logs: the one charged first is given back), so the refused
// request charges nothing.
func TestRefusedRequestChargesNothingOnNodes(t *testing.T) {
	clk := testclock.New(start)
	c := nodetest.Start(t, 2, func(cfg *node.Config) { cfg.Clock = clk })
	cfg := `
domain: web
descriptors:
  - key: queue
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: leaky_bucket}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: token_bucket}
  - key: window
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_window}
`
	conf, err := config.Load([]config.File{{Name: "t", Data: []byte(cfg)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := c.Nodes[0]
	for i, alg := range []string{"queue", "log", "bucket", "window"} {
		lim := &refusingNode{Node: a, refuse: 2}
		s := New(lim, clk.Now, nil)
		s.SetConfig(conf)
		// Values whose keys two different members hold.
		first, second := "", ""
		for v := 0; first == "" || second == ""; v++ {
			val := string(rune('a'+i)) + string(rune('0'+v%10)) + string(rune('0'+v/10))
			owner := a.Owner(counterKey("web", desc(alg, val).Entries))
			if owner == c.Nodes[1].Name() && first == "" {
				first = val // held by a peer: the give crosses the peer link
			} else if owner == a.Name() && second == "" {
				second = val
			}
		}
		key := counterKey("web", desc(alg, first).Entries)
		rule := conf.Domain("web").Lookup([]config.Entry{{Key: alg, Value: first}}).Rule
		a.AllowN(ctx, key, rule, 1) // another request's hit
		before, _ := a.Peek(ctx, key, rule)
		r := check(t, s, req(2, desc(alg, first), desc(alg, second)))
		if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%s: %s, want refused", alg, summary(r))
		}
		if after, _ := a.Peek(ctx, key, rule); after.Remaining != before.Remaining {
			t.Errorf("%s: the refused request charged %d hits of %s's key", alg, before.Remaining-after.Remaining, a.Owner(key))
		}
	}
}
