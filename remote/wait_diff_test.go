package remote_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/remote"
)

// The store's reservations are local's: random reservations, decisions and
// cancels on a bucket, at instants of a shared manual clock, give the same
// Decisions, the same need to give back, and the same state, step by step;
// then the waiters left all give up, and the holes their cancels left come
// back alike.
func TestReserveMatchesLocal(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	steps := 0
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		for seed := range uint64(40) {
			rng := rand.New(rand.NewPCG(seed, uint64(alg)))
			clk := testclock.New(time.Now().Truncate(time.Millisecond))
			loc := memstore.New(memstore.Config{Clock: clk})
			rem := remote.New(c, remote.Config{Clock: clk})
			remote.SetTTLPad(rem, 24*3600*1000) // the server's clock must not expire what the manual one still needs
			rule := ringlimit.Rule{Algorithm: alg, Limit: 1 + rng.Int64N(20),
				Window: time.Duration(1+rng.Int64N(2000)) * time.Millisecond, Burst: rng.Int64N(6)}
			key := fmt.Sprintf("diff-%s-%d", alg, seed)
			type pair struct {
				l memstore.Reservation
				r func(context.Context) error
			}
			var pend []pair
			gap := max(1, rule.WindowMillis()/rule.Limit)
			for step := range 60 {
				steps++
				clk.Advance(time.Duration(rng.Int64N(3*gap)) * time.Millisecond)
				where := fmt.Sprintf("%s seed %d step %d (%+v)", alg, seed, step, rule)
				switch op := rng.IntN(4); {
				case op <= 1:
					n := 1 + rng.Int64N(rule.Capacity())
					lr, lerr := loc.ReserveN(clk.Now(), key, rule, n, time.Time{})
					rd, _, rc, rerr := rem.Reserve(ctx, key, rule, n, time.Time{})
					if lerr != nil || rerr != nil {
						t.Fatalf("%s: reserve %d: %v, %v", where, n, lerr, rerr)
					}
					rd.Source = lr.Decision.Source
					if lr.Decision != rd {
						t.Fatalf("%s: reserve %d: local %+v, remote %+v", where, n, lr.Decision, rd)
					}
					if ahead := lr.At.After(clk.Now()); ahead != (rc != nil) {
						t.Fatalf("%s: reserve %d: local acts later %v, remote can cancel %v", where, n, ahead, rc != nil)
					}
					if rc != nil {
						pend = append(pend, pair{lr, rc})
					}
				case op == 2:
					ld, _ := loc.AllowN(ctx, key, rule, 1)
					rd, err := rem.AllowN(ctx, key, rule, 1)
					if err != nil {
						t.Fatal(err)
					}
					rd.Source = ld.Source
					if ld != rd {
						t.Fatalf("%s: allow: local %+v, remote %+v", where, ld, rd)
					}
				case len(pend) > 0:
					i := rng.IntN(len(pend))
					loc.CancelAt(clk.Now(), pend[i].l)
					if err := pend[i].r(ctx); err != nil {
						t.Fatal(err)
					}
					pend = append(pend[:i], pend[i+1:]...)
				}
				ls, ok := loc.Export(key)
				if !ok {
					continue
				}
				v, err := c.Do(ctx, c.B().Get().Key(rem.Key(key)).Build()).AsBytes()
				if err != nil {
					t.Fatalf("%s: GET: %v", where, err)
				}
				rs, err := remote.DecodeState(v)
				if err != nil || rs.A != ls.A || rs.B != ls.B {
					t.Fatalf("%s: state: local %+v, remote %+v, %v", where, ls, rs, err)
				}
			}
			// Everyone still waiting gives up, in a random order: the holes
			// come back alike.
			for len(pend) > 0 {
				clk.Advance(time.Duration(rng.Int64N(gap)) * time.Millisecond)
				i := rng.IntN(len(pend))
				loc.CancelAt(clk.Now(), pend[i].l)
				if err := pend[i].r(ctx); err != nil {
					t.Fatal(err)
				}
				pend = append(pend[:i], pend[i+1:]...)
				ld, _ := loc.AllowNAt(clk.Now(), key, rule, 0)
				rd, err := rem.Peek(ctx, key, rule)
				if err != nil {
					t.Fatal(err)
				}
				rd.Source = ld.Source
				if ld != rd {
					t.Fatalf("%s seed %d, after a last cancel: local %+v, remote %+v", alg, seed, ld, rd)
				}
			}
		}
	}
	t.Logf("%d steps", steps)
}
