package remote_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
)

// The scripts share ringlimit.MaxWindow with Validate and the peer wire:
// at the longest window a rule may have (about 146 years), AllowN and
// AllowAll decide in the store exactly as local does, over steps from a
// millisecond to decades, so a rule that validates is decided alike
// wherever its key lives; a longer window is refused.
func TestMaxWindowMatchesLocal(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	steps := []time.Duration{0, 0, time.Millisecond, time.Second, 0, 24 * time.Hour, 0, 10 * 365 * 24 * time.Hour, 0, 0, 40 * 365 * 24 * time.Hour, 0}
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket, ringlimit.FixedWindow, ringlimit.SlidingWindow} {
		rules := []ringlimit.Rule{
			{Algorithm: alg, Limit: 3, Window: ringlimit.MaxWindow, Burst: 2},
			{Algorithm: alg, Limit: 488, Window: ringlimit.MaxWindow - time.Millisecond},
		}
		clk := testclock.New(time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC))
		loc := local.New(local.Config{Clock: clk})
		rem := remote.New(c, remote.Config{Clock: clk, Prefix: "maxwindow:" + alg.String() + ":"})
		var admitted, denied int
		for i, step := range steps {
			clk.Set(clk.Now().Add(step))
			dl, el := loc.AllowN(ctx, "k", rules[0], 1)
			dr, er := rem.AllowN(ctx, "k", rules[0], 1)
			dr.Source = dl.Source
			if el != nil || er != nil || dl != dr {
				t.Fatalf("%s step %d AllowN: local %+v %v, remote %+v %v", alg, i, dl, el, dr, er)
			}
			if dl.Allowed {
				admitted++
			} else {
				denied++
			}
			al, el := loc.AllowAll(ctx, "all", rules, 1)
			ar, er := rem.AllowAll(ctx, "all", rules, 1)
			if el != nil || er != nil || len(al) != 2 || len(ar) != 2 {
				t.Fatalf("%s step %d AllowAll: %v, %v", alg, i, el, er)
			}
			for j := range al {
				ar[j].Source = al[j].Source
				if al[j] != ar[j] {
					t.Fatalf("%s step %d AllowAll rule %d: local %+v, remote %+v", alg, i, j, al[j], ar[j])
				}
			}
		}
		if admitted == 0 || denied == 0 {
			t.Fatalf("%s: %d admitted, %d denied: a sequence too tame", alg, admitted, denied)
		}
		// A millisecond more is no rule's: refused at once, as everywhere.
		over := ringlimit.Rule{Algorithm: alg, Limit: 1, Window: ringlimit.MaxWindow + time.Millisecond}
		if _, err := rem.AllowN(ctx, "over", over, 1); !errors.Is(err, ringlimit.ErrInvalidRule) {
			t.Fatalf("%s: a window over MaxWindow: %v, want ErrInvalidRule", alg, err)
		}
	}
}
