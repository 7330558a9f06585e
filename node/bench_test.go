package node_test

import (
	"bufio"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

func BenchmarkOwnedKey(b *testing.B) {
	c := nodetest.Start(b, 3, nil)
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
	c := nodetest.Start(b, 2, func(cfg *node.Config) { cfg.ForwardTimeout = time.Second })
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
