package remote_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// BenchmarkWriteStates measures the write-behind: WriteStates calls of
// `states` fixed-window states each (distinct keys of 1024), one caller, as
// the node's writer makes them. Custom metric: states/s.
func BenchmarkWriteStates(b *testing.B) {
	srv := valkeytest.Start(b)
	c := dial(b, srv.Addr())
	l := remote.New(c, remote.Config{Prefix: "wb:"})
	ctx := context.Background()
	now := time.Now().UnixMilli()
	for _, n := range []int{1, 64, 512} {
		b.Run("states="+strconv.Itoa(n), func(b *testing.B) {
			batch := make([]remote.KeyState, n)
			key := 0
			fill := func() {
				for j := range batch {
					batch[j] = remote.KeyState{Key: "user:" + strconv.Itoa(key%benchKeys), TTL: time.Minute,
						State: remote.State{Algorithm: ringlimit.FixedWindow, Window: 60000, A: now / 60000, B: int64(key)}}
					key++
				}
			}
			fill()
			if err := l.WriteStates(ctx, batch); err != nil { // load the script, warm the connection
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				fill()
				b.StartTimer()
				if err := l.WriteStates(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "states/s")
		})
	}
}
