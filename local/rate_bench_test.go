package local_test

import (
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
)

// BenchmarkVsRate: one hot key, serial, the clock injected, beside
// golang.org/x/time/rate's AllowN(t, 1) on one Limiter in the same run.
// Both read the same kind of clock once per call: local through its
// Config.Clock, rate from the caller.
func BenchmarkVsRate(b *testing.B) {
	b.Run("local", func(b *testing.B) {
		clk := new(stepClock)
		clk.ns.Store(t0.UnixNano())
		l := local.New(local.Config{Clock: clk})
		rule := benchRule(ringlimit.TokenBucket)
		l.AllowN(ctx, "hot", rule, 1)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			l.AllowN(ctx, "hot", rule, 1)
		}
	})
	b.Run("x-time-rate", func(b *testing.B) {
		clk := new(stepClock)
		clk.ns.Store(t0.UnixNano())
		r := rate.NewLimiter(rate.Every(time.Microsecond), 1_000_000)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			r.AllowN(clk.Now(), 1)
		}
	})
}
