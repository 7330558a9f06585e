package remote_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// BenchmarkWriteStates measures the write-behind: WriteStates calls of
// `states` fixed-window states each (distinct keys of 1024), one caller, as
// the node's writer makes them, each with a version above the stored one
// (so every state is written). Beside it, unfenced: what WriteStates sent
// before it was fenced, one SET … GET PX per state, pipelined. Custom
// metrics: states/s, and srv-µs/state, the server's time in the write's
// commands (INFO commandstats: EVALSHA and EVAL, whose time includes the
// commands their script calls, or SET) per state.
func BenchmarkWriteStates(b *testing.B) {
	srv := valkeytest.Start(b)
	c := dial(b, srv.Addr())
	l := remote.New(c, remote.Config{Prefix: "wb:"})
	ctx := context.Background()
	now := time.Now().UnixMilli()
	for _, n := range []int{1, 64, 512} {
		batch := make([]remote.KeyState, n)
		key := 0
		fill := func() {
			for j := range batch {
				batch[j] = remote.KeyState{Key: "user:" + strconv.Itoa(key%benchKeys), TTL: time.Minute,
					State: remote.State{Algorithm: ringlimit.FixedWindow, Window: 60000, A: now / 60000, B: int64(key)},
					Ver:   remote.Version{Epoch: uint64(now), Seq: uint64(key)}} // each above the last
				key++
			}
		}
		unfenced := func(ctx context.Context, states []remote.KeyState) error {
			cmds := make(valkey.Commands, 0, len(states))
			for _, ks := range states {
				cmds = append(cmds, c.B().Set().Key("un"+l.Key(ks.Key)).Value(valkey.BinaryString(remote.EncodeState(ks.State))).
					Get().PxMilliseconds(ks.TTL.Milliseconds()).Build())
			}
			for _, r := range c.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil && !valkey.IsValkeyNil(err) {
					return err
				}
			}
			return nil
		}
		for _, w := range []struct {
			name  string
			write func(context.Context, []remote.KeyState) error
			cmds  []string
		}{{"fenced", l.WriteStates, []string{"evalsha", "eval"}}, {"unfenced", unfenced, []string{"set"}}} {
			b.Run(w.name+"/states="+strconv.Itoa(n), func(b *testing.B) {
				fill()
				if err := w.write(ctx, batch); err != nil { // load the script, warm the connection
					b.Fatal(err)
				}
				before := serverUsec(b, c, w.cmds)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					fill()
					b.StartTimer()
					if err := w.write(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "states/s")
				b.ReportMetric(float64(serverUsec(b, c, w.cmds)-before)/float64(b.N*n), "srv-µs/state")
			})
		}
	}
}

// serverUsec is the server's time so far in cmds.
func serverUsec(b *testing.B, c valkey.Client, cmds []string) int64 {
	st := commandStats(b, c)
	var us int64
	for _, cmd := range cmds {
		us += st[cmd].usec
	}
	return us
}
