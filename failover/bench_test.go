package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/local"
)

// nop is the most trivial primary: a constant answer.
type nop struct{}

func (nop) AllowN(_ context.Context, _ string, r ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	return ringlimit.Decision{Allowed: true, Limit: r.Limit, Remaining: r.Limit - n, Source: ringlimit.Store}, nil
}
func (nop) Peek(_ context.Context, _ string, r ringlimit.Rule) (ringlimit.Decision, error) {
	return ringlimit.Decision{Allowed: true, Limit: r.Limit, Remaining: r.Limit, Source: ringlimit.Store}, nil
}
func (nop) Reset(context.Context, string) error { return nil }

var benchRule = ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1 << 40, Window: time.Millisecond}

func runBench(b *testing.B, l ringlimit.Limiter, parallel bool) {
	b.ReportAllocs()
	if !parallel {
		for b.Loop() {
			if _, err := l.AllowN(ctx, "k", benchRule, 1); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.AllowN(ctx, "k", benchRule, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// The cost the wrapper adds to a healthy call: each primary alone, then
// behind failover.
func BenchmarkHealthy(b *testing.B) {
	for _, p := range []struct {
		name string
		new  func() ringlimit.Limiter
	}{
		{"nop", func() ringlimit.Limiter { return nop{} }},
		{"local", func() ringlimit.Limiter { return local.New(local.Config{}) }},
	} {
		for _, par := range []bool{false, true} {
			mode := "serial"
			if par {
				mode = "parallel"
			}
			b.Run(p.name+"/alone/"+mode, func(b *testing.B) { runBench(b, p.new(), par) })
			b.Run(p.name+"/failover/"+mode, func(b *testing.B) { runBench(b, failover.New(p.new(), failover.Config{}), par) })
		}
	}
}

// A decision while the breaker is open, by policy.
func BenchmarkOpen(b *testing.B) {
	for _, policy := range []failover.Policy{failover.Open, failover.Closed, failover.LocalShare} {
		for _, par := range []bool{false, true} {
			mode := "serial"
			if par {
				mode = "parallel"
			}
			b.Run(policy.String()+"/"+mode, func(b *testing.B) {
				f := newFake()
				l := failover.New(f, failover.Config{
					Policy:      policy,
					Cooldown:    time.Hour,
					MaxFailures: 1,
					Local:       local.New(local.Config{}),
					Share:       func() int { return 3 },
				})
				f.set(fail)
				l.AllowN(ctx, "k", benchRule, 1)
				if l.State() != failover.StateOpen {
					b.Fatal("breaker not open")
				}
				runBench(b, l, par)
			})
		}
	}
}
