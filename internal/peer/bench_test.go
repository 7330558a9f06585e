package peer

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"
)

// BenchmarkLink measures a call over the link on loopback, sealed and in
// clear side by side, for one caller (with p50) and for 32.
func BenchmarkLink(b *testing.B) {
	for _, mode := range []string{"clear", "sealed"} {
		key := secret
		if mode == "clear" {
			key = nil
		}
		s := Serve(listen(b), ServerConfig{Secret: key, Handler: &noopHandler{}})
		c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: key, Timeout: 10 * time.Second})
		req := Request{Op: OpAllow, Key: "user:42", Rule: rule, N: 1}
		if _, err := c.Do(context.Background(), &req); err != nil {
			b.Fatal(err)
		}
		b.Run(mode+"/1", func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b)()
			lat := make([]time.Duration, 0, b.N)
			for range b.N {
				start := time.Now()
				if _, err := c.Do(context.Background(), &req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
		})
		b.Run(mode+"/32", func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b)()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				r := req
				for pb.Next() {
					c.Do(context.Background(), &r)
				}
			})
		})
		c.Close()
		s.Close()
	}
}

// noopHandler answers at once, as an owner does from memory.
type noopHandler struct{}

func (noopHandler) Serve(context.Context, *Request) Result { return Result{} }
func (noopHandler) Quick(*Request) bool                    { return true }

// reportCPU reports the process's CPU time (user and system, both ends)
// per operation: on a shared machine it varies less than wall time. Call
// the function it returns when the operations are done.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64((cpu()-start).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op") }
}
