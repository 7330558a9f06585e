package rls

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/ringlimitd/internal/config"
)

// TestAllOrNothingUnderContention: requests of two limited descriptors,
// sent by 32 callers at once to the members of a three-member cluster on a
// still clock, never admit more than the limit, and their keys are charged
// no more than the admitted requests and what give-backs could not take
// back (logged: the hits refused requests left charged).
func TestAllOrNothingUnderContention(t *testing.T) {
	clk := testclock.New(start)
	c := nodetest.Start(t, 3, func(cfg *node.Config) { cfg.Clock = clk })
	const limit = 40
	conf, err := config.Load([]config.File{{Name: "t", Data: []byte(fmt.Sprintf(`
domain: web
descriptors:
  - key: fixed_window
    rate_limit: {unit: minute, requests_per_unit: %[1]d}
  - key: sliding_window
    rate_limit: {unit: minute, requests_per_unit: %[1]d, algorithm: sliding_window}
  - key: token_bucket
    rate_limit: {unit: hour, requests_per_unit: %[1]d, algorithm: token_bucket}
  - key: leaky_bucket
    rate_limit: {unit: hour, requests_per_unit: %[1]d, algorithm: leaky_bucket}
  - key: sliding_log
    rate_limit: {unit: minute, requests_per_unit: %[1]d, algorithm: sliding_log}
`, limit))}}, false)
	if err != nil {
		t.Fatal(err)
	}
	svcs := make([]*Service, len(c.Nodes))
	for i, nd := range c.Nodes {
		svcs[i] = New(nd, clk.Now, nil)
		svcs[i].SetConfig(conf)
	}
	ctx := context.Background()
	a := c.Nodes[0]
	for round, pair := range [][2]string{
		{"fixed_window", "sliding_window"}, {"fixed_window", "token_bucket"}, {"sliding_window", "leaky_bucket"},
		{"token_bucket", "sliding_log"}, {"leaky_bucket", "sliding_log"}, {"sliding_log", "sliding_log"}, {"leaky_bucket", "leaky_bucket"},
	} {
		// Two values whose keys two different members hold.
		vals := [2]string{}
		for v := 0; vals[0] == "" || vals[1] == ""; v++ {
			val := fmt.Sprintf("r%d-%d", round, v)
			owner := a.Owner(counterKey("web", desc(pair[0], val).Entries))
			if vals[0] == "" {
				vals[0] = val
			} else if owner != a.Owner(counterKey("web", desc(pair[0], vals[0]).Entries)) && vals[1] == "" {
				vals[1] = val
			}
		}
		// Each key also takes hits of requests of its own: the two keys run
		// out at different moments, so charges race the other's refusals.
		var admitted, sent atomic.Int64
		var own [2]atomic.Int64 // the keys' own requests admitted
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for i := 0; sent.Add(1) <= 12*limit; i++ {
					s := svcs[(g+i)%len(svcs)]
					r, k := req(1, desc(pair[0], vals[0]), desc(pair[1], vals[1])), (g+i)%2
					if i%3 == 2 { // a key's own traffic
						r = req(1, desc(pair[k], vals[k]))
					}
					resp, err := s.Check(ctx, r)
					if err != nil {
						t.Error(err)
						return
					}
					switch {
					case resp.OverallCode != pb.RateLimitResponse_OK:
					case len(r.Descriptors) == 2:
						admitted.Add(1)
					default:
						own[k].Add(1)
					}
				}
			})
		}
		wg.Wait()
		var charged [2]int64
		for k := range 2 {
			key := counterKey("web", desc(pair[k], vals[k]).Entries)
			rule := conf.Domain("web").Lookup([]config.Entry{{Key: pair[k], Value: vals[k]}}).Rule
			d, err := a.Peek(ctx, key, rule)
			if err != nil {
				t.Fatal(err)
			}
			charged[k] = limit - d.Remaining
		}
		var leaked [2]int64 // hits refused requests left charged
		for k := range 2 {
			leaked[k] = charged[k] - admitted.Load() - own[k].Load()
			if leaked[k] < 0 || charged[k] > limit {
				t.Fatalf("%s + %s: key %d charged %d, for %d requests of both and %d of its own admitted (limit %d): a request admitted uncharged",
					pair[0], pair[1], k, charged[k], admitted.Load(), own[k].Load(), limit)
			}
		}
		t.Logf("%s + %s: admitted %d requests of both, %d and %d of the keys' own; refused requests left %d and %d hits charged",
			pair[0], pair[1], admitted.Load(), own[0].Load(), own[1].Load(), leaked[0], leaked[1])
	}
}
