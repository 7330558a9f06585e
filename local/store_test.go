package local

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
)

// Each shard's byte count equals what its keys hold, recounted, after a
// random mix of every operation that adds, changes or drops state, with
// evictions by MaxKeys and by MaxBytes.
func TestBytesAccounting(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	l := New(Config{MaxKeys: 300, MaxBytes: 60 << 10, Clock: clk})
	r := rand.New(rand.NewPCG(5, 6))
	rules := []ringlimit.Rule{
		{Algorithm: ringlimit.SlidingLog, Limit: 50, Window: time.Second},
		{Algorithm: ringlimit.SlidingLog, Limit: 200, Window: time.Minute},
		{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second},
		{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute},
	}
	ctx := context.Background()
	for step := range 50_000 {
		key := fmt.Sprint("k", r.IntN(500))
		if r.IntN(3) == 0 {
			key += string(make([]byte, r.IntN(300)))
		}
		switch x := r.IntN(100); {
		case x < 80:
			l.AllowN(ctx, key, rules[r.IntN(len(rules))], 1+int64(r.IntN(3)))
		case x < 85:
			l.Reset(ctx, key)
		case x < 90:
			if st, ok := l.Take(key); ok {
				l.Import(fmt.Sprint("m", r.IntN(500)), st)
			}
		case x < 93:
			l.AllowNHeldAt(clk.Now(), key, rules[r.IntN(len(rules))], 1)
		default:
			clk.Advance(time.Duration(r.IntN(50)) * time.Millisecond)
		}
		if step%500 == 0 {
			var keys int
			for i := range l.shards {
				s := &l.shards[i]
				want := int64(0)
				n := 0
				s.indexRange(func(j int32) {
					e := s.at(j)
					want += entryBytes + keyBytes(len(e.key)) + e.st.bytes()
					n++
				})
				if s.bytes != want || n != s.nkeys {
					t.Fatalf("step %d shard %d: %d bytes, %d keys counted; %d, %d held", step, i, s.bytes, s.nkeys, want, n)
				}
				if s.bytes > s.maxBytes+8*200+64 { // one log may hold up to its Limit alone
					t.Fatalf("step %d shard %d: %d bytes, over %d", step, i, s.bytes, s.maxBytes)
				}
				keys += n
			}
			if keys > 300 {
				t.Fatalf("step %d: %d keys held, over MaxKeys 300", step, keys)
			}
		}
	}
	if st := l.Stats(); st.Evicted == 0 {
		t.Fatalf("the workload never reached the bounds: %+v", st)
	}
}

// divider divides exactly, at the edges of every quotient.
func TestDivider(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	ds := []int64{1, 2, 3, 7, 1000, 86_400_000, 1<<51 - 1, 1 << 51}
	for range 200 {
		ds = append(ds, 1+r.Int64N(1<<51))
	}
	for _, d := range ds {
		v := newDivider(d)
		as := []int64{0, 1, d - 1, d, d + 1, 1<<52 - 1, 1 << 52, 1<<62 - 1}
		for range 200 {
			as = append(as, r.Int64N(1<<62))
			q := r.Int64N((1<<62)/d + 1)
			as = append(as, q*d, q*d-1, q*d+1)
		}
		for _, a := range as {
			if a < 0 || a >= 1<<62 {
				continue
			}
			if got := v.div(a); got != a/d {
				t.Fatalf("%d/%d = %d, want %d", a, d, got, a/d)
			}
			if got := v.ceil(a); got != ceilDiv(a, d) {
				t.Fatalf("⌈%d/%d⌉ = %d, want %d", a, d, got, ceilDiv(a, d))
			}
		}
	}
}
