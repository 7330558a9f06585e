package remote_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// The round-trip floor: EVALSHA of a script that does nothing.
var floorScript = valkey.NewLuaScript("return 1")

// A minimal GCRA-style limiter script (TIME, GET, SET … PX), the shape of
// redis_rate: the baseline the scripts are held to.
var gcraScript = valkey.NewLuaScript(`
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local emission, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
tat = math.max(tat, now)
local newtat = tat + emission
if newtat - now > tolerance then return {0, newtat - now - tolerance} end
redis.call('SET', KEYS[1], newtat, 'PX', newtat - now)
return {1, 0}
`)

const benchKeys = 1024

// BenchmarkDecide measures decisions per second and latency with 1 and 32
// callers for every algorithm, beside the two baselines, all against one
// server, with the client settings the node uses. Custom metrics:
// decisions/s, p50-µs and p99-µs (client-side latency of one call), evalsha/op
// (server script calls per decision, from INFO commandstats) and
// srv-µs/call (the server's usec_per_call for those calls).
func BenchmarkDecide(b *testing.B) {
	srv := valkeytest.Start(b)
	c := dial(b, srv.Addr())
	l := remote.New(c, remote.Config{Prefix: "bench:"})
	keys := make([]string, benchKeys)
	rkeys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
		rkeys[i] = "gcra:{" + keys[i] + "}"
	}
	// 32 callers first: afterwards valkey-go keeps the connection in its
	// pipelined mode, the one a long-lived node lives in.
	for _, callers := range []int{32, 1} {
		for _, alg := range algorithms {
			rule := ringlimit.Rule{Algorithm: alg, Limit: 1000, Window: time.Second}
			b.Run(fmt.Sprintf("%s/callers=%d", alg, callers), func(b *testing.B) {
				measure(b, c, callers, "evalsha", func(ctx context.Context, i int) error {
					_, err := l.AllowN(ctx, keys[i%benchKeys], rule, 1)
					return err
				})
			})
		}
		b.Run(fmt.Sprintf("peek/callers=%d", callers), func(b *testing.B) {
			rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1000, Window: time.Second}
			measure(b, c, callers, "evalsha_ro", func(ctx context.Context, i int) error {
				_, err := l.Peek(ctx, keys[i%benchKeys], rule)
				return err
			})
		})
		b.Run(fmt.Sprintf("baseline-return1/callers=%d", callers), func(b *testing.B) {
			measure(b, c, callers, "evalsha", func(ctx context.Context, i int) error {
				return floorScript.Exec(ctx, c, nil, nil).Error()
			})
		})
		b.Run(fmt.Sprintf("baseline-gcra/callers=%d", callers), func(b *testing.B) {
			args := []string{"1", "1000"} // 1 ms per hit, 1 s of tolerance
			measure(b, c, callers, "evalsha", func(ctx context.Context, i int) error {
				return gcraScript.Exec(ctx, c, []string{rkeys[i%benchKeys]}, args).Error()
			})
		})
	}
}

// measure runs op b.N times from callers goroutines and reports the metrics.
func measure(b *testing.B, c valkey.Client, callers int, cmd string, op func(ctx context.Context, i int) error) {
	ctx := context.Background()
	for i := range 64 { // load the script, warm the connection
		if err := op(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]int64, b.N)
	var next atomic.Int64
	before := commandStats(b, c)[cmd]
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	one := func() {
		i := int(next.Add(1) - 1)
		t := time.Now()
		if err := op(ctx, i); err != nil {
			b.Error(err)
		}
		lat[i] = int64(time.Since(t))
	}
	if callers == 1 {
		for range b.N {
			one()
		}
	} else {
		b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0))) // callers goroutines in all
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one()
			}
		})
	}
	elapsed := time.Since(start)
	b.StopTimer()
	after := commandStats(b, c)[cmd]
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(lat[len(lat)/2])/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e3, "p99-µs")
	if calls := after.calls - before.calls; calls > 0 {
		b.ReportMetric(float64(calls)/float64(b.N), cmd+"/op")
		b.ReportMetric(float64(after.usec-before.usec)/float64(calls), "srv-µs/call")
	}
}

// BenchmarkFreshClient measures one caller on a client that has never served
// concurrent callers (valkey-go then writes inline instead of handing the
// call to its background goroutines).
func BenchmarkFreshClient(b *testing.B) {
	srv := valkeytest.Start(b)
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.FixedWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			c := dial(b, srv.Addr())
			l := remote.New(c, remote.Config{Prefix: "fresh:"})
			rule := ringlimit.Rule{Algorithm: alg, Limit: 1000, Window: time.Second}
			measure(b, c, 1, "evalsha", func(ctx context.Context, i int) error {
				_, err := l.AllowN(ctx, "user:"+strconv.Itoa(i%benchKeys), rule, 1)
				return err
			})
		})
	}
	b.Run("baseline-return1", func(b *testing.B) {
		c := dial(b, srv.Addr())
		measure(b, c, 1, "evalsha", func(ctx context.Context, i int) error {
			return floorScript.Exec(ctx, c, nil, nil).Error()
		})
	})
}

// BenchmarkSlidingLogSize measures the sliding log's cost against the size
// of its value: one key whose log holds `entries` distinct milliseconds (16
// bytes each), one hit per ms, so every call drops one entry and adds one.
func BenchmarkSlidingLogSize(b *testing.B) {
	srv := valkeytest.Start(b)
	c := dial(b, srv.Addr())
	for _, entries := range []int64{16, 256, 4096, 65536} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			clk := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			l := remote.New(c, remote.Config{Prefix: "logsize:", Clock: clk})
			rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: entries, Window: time.Duration(entries) * time.Millisecond}
			key := "k" + strconv.FormatInt(entries, 10)
			if err := l.Reset(context.Background(), key); err != nil { // b.Run may run this twice
				b.Fatal(err)
			}
			for range entries { // fill the window
				if d, err := l.AllowN(context.Background(), key, rule, 1); err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
				clk.Advance(time.Millisecond)
			}
			measure(b, c, 1, "evalsha", func(ctx context.Context, i int) error {
				d, err := l.AllowN(ctx, key, rule, 1)
				if err == nil && !d.Allowed {
					err = fmt.Errorf("denied: %+v", d)
				}
				clk.Advance(time.Millisecond)
				return err
			})
		})
	}
}
