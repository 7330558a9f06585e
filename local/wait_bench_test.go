package local_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
)

// ReserveN beside AllowNAt on one hot key, injected time: admitted at once
// (a bucket that never runs dry), and reserved ahead then given back.
func BenchmarkReserve(b *testing.B) {
	roomy := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1 << 20, Window: time.Millisecond}
	dry := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1, Window: time.Hour}
	now := time.UnixMilli(1_700_000_000_000)
	b.Run("AllowNAt", func(b *testing.B) {
		l := local.New(local.Config{})
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			l.AllowNAt(now.Add(time.Duration(i)*time.Millisecond), "k", roomy, 1)
		}
	})
	b.Run("ReserveN/at_once", func(b *testing.B) {
		l := local.New(local.Config{})
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			l.ReserveN(now.Add(time.Duration(i)*time.Millisecond), "k", roomy, 1, time.Time{})
		}
	})
	b.Run("ReserveN/ahead+CancelAt", func(b *testing.B) {
		l := local.New(local.Config{})
		l.AllowNAt(now, "k", dry, 1)
		b.ReportAllocs()
		for b.Loop() {
			r, _ := l.ReserveN(now, "k", dry, 1, time.Time{})
			l.CancelAt(now, r)
		}
	})
}
