package remote_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
)

// A long sliding log on one key, against local: thousands of distinct
// milliseconds, so pruning and the RetryAfter scan cross many 32-entry
// chunks and the value is compacted many times. After every call the stored
// value must decode, and its dead prefix must stay bounded.
func TestSlidingLogLong(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	clk := testclock.New(time.Date(2026, 7, 8, 9, 10, 11, 0, time.UTC))
	loc := local.New(local.Config{Clock: clk})
	rem := remote.New(c, remote.Config{Clock: clk, Prefix: "long:"})
	remote.SetTTLPad(rem, 3600_000)
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 300, Window: 400 * time.Millisecond}
	rng := rand.New(rand.NewPCG(7, 7))
	sets0 := commandStats(t, c)["set"].calls
	var admitted, denied, maxLen int
	for i := range 6000 {
		step := time.Duration(rng.IntN(4)) * time.Millisecond
		if rng.IntN(200) == 0 {
			step = time.Duration(100+rng.IntN(300)) * time.Millisecond // prune many chunks at once
		}
		clk.Advance(step)
		var n int64
		switch x := rng.IntN(100); {
		case x < 5:
			n = 0
		case x < 10:
			n = 50 + rng.Int64N(250) // deep RetryAfter scans
		default:
			n = 1 + rng.Int64N(2)
		}
		dl, el := loc.AllowN(ctx, "k", rule, n)
		dr, er := rem.AllowN(ctx, "k", rule, n)
		if el != nil || er != nil {
			t.Fatalf("step %d: %v %v", i, el, er)
		}
		dr.Source = dl.Source
		if dl != dr {
			t.Fatalf("step %d n=%d:\nlocal  %+v\nremote %+v", i, n, dl, dr)
		}
		if n > 0 && dl.Allowed {
			admitted++
		} else if !dl.Allowed {
			denied++
		}
		raw, err := c.Do(ctx, c.B().Get().Key(rem.Key("k")).Build()).AsBytes()
		if valkey.IsValkeyNil(err) && dl.Remaining == rule.Limit {
			continue // nothing recorded yet
		}
		if err != nil {
			t.Fatal(err)
		}
		st, err := remote.DecodeState(raw)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		var held int64
		for _, e := range st.Log {
			held += e.Count
		}
		if held > rule.Limit || held < rule.Limit-dl.Remaining {
			t.Fatalf("step %d: the value holds %d stamps; the decision says %d remain", i, held, dl.Remaining)
		}
		// Live entries at most Limit, dead ones at most max(1024 bytes, live) + a chunk.
		maxLen = max(maxLen, len(raw))
	}
	compactions := commandStats(t, c)["set"].calls - sets0 - 1
	t.Logf("%d admitted, %d denied, %d compactions, longest value %d bytes", admitted, denied, compactions, maxLen)
	if compactions < 10 || denied < 100 {
		t.Errorf("too tame: %d compactions, %d denied", compactions, denied)
	}
	if limit := 57 + 2*16*300 + 1024 + 16; maxLen > limit {
		t.Errorf("value grew to %d bytes, over %d", maxLen, limit)
	}
}
