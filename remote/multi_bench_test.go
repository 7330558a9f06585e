package remote_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

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
