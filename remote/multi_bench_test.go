package remote_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// BenchmarkAllowAll sets AllowAll's script with 2 rules beside one AllowN
// (the single-rule script) and AllowAll with 1 rule, per algorithm, one
// caller, with the same metrics as BenchmarkDecide (srv-µs/call is the
// server's time per script run). The bound: 2 rules ≤ 1.3× one.
func BenchmarkAllowAll(b *testing.B) {
	srv := valkeytest.Start(b)
	c := dial(b, srv.Addr())
	l := remote.New(c, remote.Config{Prefix: "bench:"})
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, alg := range algorithms {
		rules := []ringlimit.Rule{
			{Algorithm: alg, Limit: 1000, Window: time.Second},
			{Algorithm: alg, Limit: 100_000, Window: time.Hour},
		}
		b.Run(fmt.Sprintf("%s/AllowN", alg), func(b *testing.B) {
			measure(b, c, 1, "evalsha", func(ctx context.Context, i int) error {
				_, err := l.AllowN(ctx, keys[i%benchKeys], rules[0], 1)
				return err
			})
		})
		for _, k := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/AllowAll-%d", alg, k), func(b *testing.B) {
				measure(b, c, 1, "evalsha", func(ctx context.Context, i int) error {
					_, err := l.AllowAll(ctx, keys[i%benchKeys], rules[:k], 1)
					return err
				})
			})
		}
	}
}

// BenchmarkAllowAllSideBySide holds AllowAll with 2 rules against one
// AllowN on the first rule in one run, per algorithm, one caller: rounds of
// each alternate (which goes first alternates too) on the same client and
// connection, both scripts warmed first, so both meet the same machine and
// the same valkey-go mode. (Run one after the other, as BenchmarkAllowAll
// does, they need not: once a connection has served concurrent callers,
// valkey-go hands every later call to its goroutines.) conn=shared has
// served concurrent callers first, as a node's connection has; conn=fresh
// never has (valkey-go writes inline).
//
// A round is 500 calls of one kind, b.N/500 rounds each (at least 16, of
// b.N/16 calls): -benchtime 32000x gives 64 rounds of 500, as this shared
// machine's load, which moves single rounds, asks. The metrics are medians
// over the rounds: each kind's client p50 (N-p50-µs,
// all-p50-µs) and server time per script run (N-srv-µs, all-srv-µs: the
// evalsha usec/calls delta of INFO commandstats over the round, which runs
// only that kind), and the medians of the rounds' ratios, 2 rules ÷ AllowN
// (p50-ratio, srv-ratio). The bound: 2 rules ≤ 1.3× one.
func BenchmarkAllowAllSideBySide(b *testing.B) {
	srv := valkeytest.Start(b)
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, conn := range []string{"shared", "fresh"} {
		c := dial(b, srv.Addr())
		l := remote.New(c, remote.Config{Prefix: "side:" + conn + ":"})
		if conn == "shared" {
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					for i := range 32 {
						if err := floorScript.Exec(context.Background(), c, nil, nil).Error(); err != nil {
							b.Error(g, i, err)
						}
					}
				})
			}
			wg.Wait()
		}
		for _, alg := range algorithms {
			rules := []ringlimit.Rule{
				{Algorithm: alg, Limit: 1000, Window: time.Second},
				{Algorithm: alg, Limit: 100_000, Window: time.Hour},
			}
			one := func(ctx context.Context, i int) error {
				_, err := l.AllowN(ctx, keys[i%benchKeys], rules[0], 1)
				return err
			}
			two := func(ctx context.Context, i int) error {
				_, err := l.AllowAll(ctx, keys[i%benchKeys], rules, 1)
				return err
			}
			b.Run(fmt.Sprintf("%s/conn=%s", alg, conn), func(b *testing.B) {
				sideBySide(b, c, one, two)
			})
		}
	}
}

// sideBySide runs one and two in alternating rounds and reports the medians
// of their rounds (BenchmarkAllowAllSideBySide).
func sideBySide(b *testing.B, c valkey.Client, one, two func(ctx context.Context, i int) error) {
	ctx := context.Background()
	for i := range 64 {
		if err := one(ctx, i); err != nil {
			b.Fatal(err)
		}
		if err := two(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
	per, rounds := 500, b.N/500
	if rounds < 16 {
		per, rounds = max(1, b.N/16), 16
	}
	lat := make([]int64, per)
	// round runs op per times and returns its p50 and server µs per call.
	round := func(op func(ctx context.Context, i int) error, base int) (p50, srv float64) {
		before := commandStats(b, c)["evalsha"]
		for i := range per {
			t := time.Now()
			if err := op(ctx, base+i); err != nil {
				b.Fatal(err)
			}
			lat[i] = int64(time.Since(t))
		}
		after := commandStats(b, c)["evalsha"]
		slices.Sort(lat)
		if calls := after.calls - before.calls; calls > 0 {
			srv = float64(after.usec-before.usec) / float64(calls)
		}
		return float64(lat[per/2]) / 1e3, srv
	}
	var p1, p2, s1, s2, pr, sr []float64
	b.ReportAllocs()
	b.ResetTimer()
	for r := range rounds {
		var a, sa, z, sz float64
		if r%2 == 0 {
			a, sa = round(one, r*per)
			z, sz = round(two, r*per)
		} else {
			z, sz = round(two, r*per)
			a, sa = round(one, r*per)
		}
		p1, p2, s1, s2 = append(p1, a), append(p2, z), append(s1, sa), append(s2, sz)
		pr = append(pr, z/a)
		if sa > 0 {
			sr = append(sr, sz/sa)
		}
	}
	b.StopTimer()
	b.ReportMetric(median(p1), "N-p50-µs")
	b.ReportMetric(median(p2), "all-p50-µs")
	b.ReportMetric(median(pr), "p50-ratio")
	b.ReportMetric(median(s1), "N-srv-µs")
	b.ReportMetric(median(s2), "all-srv-µs")
	if len(sr) > 0 {
		b.ReportMetric(median(sr), "srv-ratio")
	}
}

// median returns the median of xs (which it sorts).
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
