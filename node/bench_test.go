package node_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

func BenchmarkOwnedKey(b *testing.B) {
	c := settled(b, 3, nil)
	a := c.Nodes[0]
	key := keysOwnedBy(a, a.Name(), 1)[0]
	rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			a.Allow(ctx, key, rule)
		}
	})
	keys := keysOwnedBy(a, a.Name(), 1024)
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				a.Allow(ctx, keys[i&1023], rule)
				i++
			}
		})
	})
}

// BenchmarkForwarded measures a call forwarded to its owner, beside a raw
// TCP ping-pong of 32-byte frames on loopback, in the same run.
func BenchmarkForwarded(b *testing.B) {
	c := nodetest.Start(b, 2, func(cfg *node.Config) {
		cfg.ForwardTimeout = time.Second
		cfg.LeaseHot = -1 // forwarding is measured: a token bucket far under its limit leases
	})
	a, o := c.Nodes[0], c.Nodes[1]
	keys := keysOwnedBy(a, o.Name(), 1024)
	rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	a.Allow(ctx, keys[0], rule)

	b.Run("pingpong/1", func(b *testing.B) { pingPong(b) })
	b.Run("forward/1", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		for i := range b.N {
			start := time.Now()
			if d, err := a.Allow(ctx, keys[i&1023], rule); err != nil || d.Source != ringlimit.Peer {
				b.Fatalf("%+v, %v", d, err)
			}
			lat = append(lat, time.Since(start))
		}
		report(b, lat)
	})
	b.Run("forward/32", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16) // 16 × GOMAXPROCS(2) = 32 callers
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				a.Allow(ctx, keys[i&1023], rule)
				i++
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
	})
}

func report(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// pingPong: one caller, request/response of 32 bytes over loopback TCP.
func pingPong(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		buf := make([]byte, 32)
		for {
			if _, err := io.ReadFull(r, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 32)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		c.Write(buf)
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	report(b, lat)
	c.Close()
	ln.Close()
	wg.Wait()
}

// settled starts n nodes with a short hand-off window (plus configure) and
// waits until they are past it, so benchmarks measure the steady path.
func settled(b *testing.B, n int, configure func(*node.Config)) *nodetest.Cluster {
	c := nodetest.Start(b, n, func(cfg *node.Config) {
		cfg.HandoffWindow = 50 * time.Millisecond
		if configure != nil {
			configure(cfg)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for _, nd := range c.Nodes {
		for nd.Stats().Changing {
			if time.Now().After(deadline) {
				b.Fatal("still in the hand-off window")
			}
			time.Sleep(5 * time.Millisecond) // polling, with a deadline
		}
	}
	return c
}

// BenchmarkOwnedKeyWriteBehind measures the owned-key path without and with
// write-behind to a real server (every 100 ms), side by side.
func BenchmarkOwnedKeyWriteBehind(b *testing.B) {
	srv := valkeytest.Start(b)
	for _, wb := range []bool{false, true} {
		c := settled(b, 3, func(cfg *node.Config) {
			if wb {
				cfg.ValkeyAddrs = []string{srv.Addr()}
			}
		})
		a := c.Nodes[0]
		key := keysOwnedBy(a, a.Name(), 1)[0]
		keys := keysOwnedBy(a, a.Name(), 1024)
		rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
		name := map[bool]string{false: "off", true: "on"}[wb]
		b.Run(name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				a.Allow(ctx, key, rule)
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					a.Allow(ctx, keys[i&1023], rule)
					i++
				}
			})
		})
		if wb && a.Stats().Writes == 0 {
			b.Fatal("write-behind wrote nothing")
		}
		for _, nd := range c.Nodes {
			nd.Close()
		}
	}
}

// BenchmarkWriteBehindWrites paces decisions at 100k/s over 10k owned keys
// on one node and reports the store writes per second the write-behind
// makes (at most one per changed key per interval).
func BenchmarkWriteBehindWrites(b *testing.B) {
	srv := valkeytest.Start(b)
	c := settled(b, 1, func(cfg *node.Config) { cfg.ValkeyAddrs = []string{srv.Addr()} })
	a := c.Nodes[0]
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprint("wb", i)
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 1_000_000, Window: time.Hour}
	const perTick, tick = 1000, 10 * time.Millisecond // 100k/s
	w0 := a.Stats().Writes
	start := time.Now()
	t := time.NewTicker(tick)
	defer t.Stop()
	b.ResetTimer()
	for i := 0; i < b.N; {
		<-t.C
		for j := 0; j < perTick && i < b.N; j++ {
			a.Allow(ctx, keys[i%len(keys)], rule)
			i++
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
	b.ReportMetric(float64(a.Stats().Writes-w0)/el.Seconds(), "store-writes/s")
	s := a.Stats()
	b.ReportMetric(float64(s.WriteDrops), "drops")
}
