package remote_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/remote"
)

// 1,000 waiters reserve in the store on a bucket the burst emptied, and
// all give up, in the order they came (the first to time out is the first
// that came) or shuffled: the next call is decided exactly as on a key
// that saw only the burst (issue 40: the cancel script gave back only what
// no later reservation was promised, and the bucket refused for 86–99 s
// with nobody waiting).
func TestStoreCancelledWaitersLeaveNoTrace(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		for _, order := range []string{"fifo", "random"} {
			t.Run(alg.String()+"/"+order, func(t *testing.T) {
				rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Second}
				clk := testclock.New(time.Now().Truncate(time.Millisecond))
				l := remote.New(c, remote.Config{Clock: clk, Prefix: "holes:" + alg.String() + order + ":"})
				remote.SetTTLPad(l, 24*3600*1000)
				for _, k := range []string{"k", "twin"} {
					if d, err := l.AllowN(ctx, k, rule, rule.Capacity()); err != nil || !d.Allowed {
						t.Fatalf("the burst: %+v, %v", d, err)
					}
				}
				const waiters = 1000
				cancels := make([]func(context.Context) error, waiters)
				for i := range cancels {
					_, _, cancel, err := l.Reserve(ctx, "k", rule, 1, time.Time{})
					if err != nil || cancel == nil {
						t.Fatalf("waiter %d: %v (nothing to cancel: %v)", i, err, cancel == nil)
					}
					cancels[i] = cancel
				}
				if order == "random" {
					rand.New(rand.NewPCG(3, 4)).Shuffle(waiters, func(i, j int) { cancels[i], cancels[j] = cancels[j], cancels[i] })
				}
				clk.Advance(10 * time.Millisecond)
				for _, cancel := range cancels {
					if err := cancel(ctx); err != nil {
						t.Fatal(err)
					}
				}
				for _, step := range []time.Duration{0, 40 * time.Millisecond, time.Second} {
					clk.Advance(step)
					got, err1 := l.AllowN(ctx, "k", rule, 1)
					want, err2 := l.AllowN(ctx, "twin", rule, 1)
					if err1 != nil || err2 != nil || got != want {
						t.Fatalf("after %d waiters gave up (%s): %+v, as if they never came: %+v (%v, %v)", waiters, order, got, want, err1, err2)
					}
				}
				if s := l.StaleCancels(); s != 0 {
					t.Fatalf("%d cancels counted stale", s)
				}
			})
		}
	}
}

// Cancels that come out of their clocks' order (each reads the clock
// before its round trip) keep the holes as memstore's do: a hole recorded
// at 20 ms is still one for a cancel that read 18 ms, and the store's
// state ends as local's.
func TestStoreCancelsOutOfClockOrder(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second}
	t0 := time.Now().Truncate(time.Millisecond)
	clk := testclock.New(t0)
	rem := remote.New(c, remote.Config{Clock: clk, Prefix: "skew:"})
	loc := memstore.New(memstore.Config{Clock: clk})
	remote.SetTTLPad(rem, 24*3600*1000)
	rem.AllowN(ctx, "k", rule, 10)
	loc.AllowN(ctx, "k", rule, 10)
	var rcs []func(context.Context) error
	var lrs []memstore.Reservation
	for range 3 {
		_, _, rc, err := rem.Reserve(ctx, "k", rule, 1, time.Time{})
		if err != nil || rc == nil {
			t.Fatal(err)
		}
		lr, _ := loc.ReserveN(t0, "k", rule, 1, time.Time{})
		rcs, lrs = append(rcs, rc), append(lrs, lr)
	}
	for _, c := range []struct{ i, ms int }{{1, 20}, {0, 19}, {2, 18}} {
		clk.Set(t0.Add(time.Duration(c.ms) * time.Millisecond))
		loc.CancelAt(clk.Now(), lrs[c.i])
		if err := rcs[c.i](ctx); err != nil {
			t.Fatal(err)
		}
	}
	clk.Set(t0.Add(100 * time.Millisecond))
	ld, _ := loc.AllowN(ctx, "k", rule, 1)
	rd, err := rem.AllowN(ctx, "k", rule, 1)
	rd.Source = ld.Source
	if err != nil || ld != rd || !rd.Allowed {
		t.Fatalf("local %+v, store %+v (%v): want both as if the waiters never came", ld, rd, err)
	}
}

// 200 waiters give up in a random order: on the way the store keeps
// memstore's holes exactly, past the runs a record holds (maxRuns, the
// record then 312 bytes) into its deep sum. After every cancel both hold
// the same state, and at the end a newcomer is placed alike.
func TestStoreHolesMatchLocal(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, 7))
			rule := ringlimit.Rule{Algorithm: alg, Limit: 1 + rng.Int64N(50), Window: time.Duration(1+rng.Int64N(3000)) * time.Millisecond, Burst: rng.Int64N(4)}
			clk := testclock.New(time.Now().Truncate(time.Millisecond))
			loc := memstore.New(memstore.Config{Clock: clk})
			rem := remote.New(c, remote.Config{Clock: clk, Prefix: fmt.Sprintf("holesdiff:%s:%d:", alg, seed)})
			remote.SetTTLPad(rem, 24*3600*1000)
			where := fmt.Sprintf("%s seed %d (%+v)", alg, seed, rule)
			loc.AllowN(ctx, "k", rule, rule.Capacity())
			rem.AllowN(ctx, "k", rule, rule.Capacity())
			type pair struct {
				l memstore.Reservation
				r func(context.Context) error
			}
			var pend []pair
			for range 200 {
				n := 1 + rng.Int64N(rule.Capacity())
				lr, _ := loc.ReserveN(clk.Now(), "k", rule, n, time.Time{})
				_, _, rc, err := rem.Reserve(ctx, "k", rule, n, time.Time{})
				if err != nil || rc == nil {
					t.Fatalf("%s: reserve: %v", where, err)
				}
				pend = append(pend, pair{lr, rc})
			}
			rng.Shuffle(len(pend), func(i, j int) { pend[i], pend[j] = pend[j], pend[i] })
			for i, p := range pend {
				loc.CancelAt(clk.Now(), p.l)
				if err := p.r(ctx); err != nil {
					t.Fatal(err)
				}
				ls, _ := loc.Export("k")
				v, err := c.Do(ctx, c.B().Get().Key(rem.Key("k")).Build()).AsBytes()
				if err != nil {
					t.Fatalf("%s: GET: %v", where, err)
				}
				rs, err := remote.DecodeState(v)
				if err != nil || rs.A != ls.A || rs.B != ls.B {
					t.Fatalf("%s, cancel %d: state: local %+v, store %+v, %v", where, i, ls, rs, err)
				}
			}
			lr, _ := loc.ReserveN(clk.Now(), "k", rule, 1, time.Time{})
			rd, at, _, err := rem.Reserve(ctx, "k", rule, 1, time.Time{})
			rd.Source = lr.Decision.Source
			if err != nil || rd != lr.Decision || at.Sub(time.Now()) > lr.At.Sub(clk.Now())+time.Second {
				t.Fatalf("%s: a newcomer: local %+v at %v, store %+v at %v, %v", where, lr.Decision, lr.At.Sub(clk.Now()), rd, time.Until(at), err)
			}
		}
	}
}

// FuzzHoleRecord stores any bytes as a key's hole record (HoleKey) and
// cancels reservations on it, the one in the middle, then the one on top:
// each cancel returns within callTimeout without an error, another
// client's PING is answered after it, and the bucket's state stays one the
// scripts read, with a level never above what it was (a record, however
// corrupt, only decides how much comes back). The seed is a real record.
func FuzzHoleRecord(f *testing.F) {
	srv, c := server(f)
	pinger := dial(f, srv.Addr())
	ctx := context.Background()
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 1}
	at := time.Now().Truncate(time.Millisecond)
	l := remote.New(c, remote.Config{Clock: testclock.New(at), Prefix: "fuzzholes:"})
	remote.SetTTLPad(l, 24*3600*1000)
	reserve := func(t testing.TB) []func(context.Context) error {
		if err := l.Reset(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		l.AllowN(ctx, "k", rule, 1)
		var cs []func(context.Context) error
		for range 3 {
			_, _, cancel, err := l.Reserve(ctx, "k", rule, 1, time.Time{})
			if err != nil || cancel == nil {
				t.Fatalf("reserve: %v", err)
			}
			cs = append(cs, cancel)
		}
		return cs
	}
	cs := reserve(f)
	if err := cs[0](ctx); err != nil { // a hole under two live waiters
		f.Fatal(err)
	}
	real, err := c.Do(ctx, c.B().Get().Key(l.HoleKey("k")).Build()).ToString()
	if err != nil || len(real) != 56+16 {
		f.Fatalf("no hole record after a cancel under live waiters: %q, %v", real, err)
	}
	f.Add(real)
	f.Add(real[:len(real)-1])
	f.Add(real[:56])
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		cs := reserve(t)
		if err := c.Do(ctx, c.B().Set().Key(l.HoleKey("k")).Value(v).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{1, 2} {
			before := level(t, c, l)
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			err := cs[i](cctx)
			cancel()
			pctx, pcancel := context.WithTimeout(ctx, callTimeout)
			perr := pinger.Do(pctx, pinger.B().Ping().Build()).Error()
			pcancel()
			if err != nil || perr != nil {
				t.Fatalf("cancel %d: %v; PING: %v", i, err, perr)
			}
			if after := level(t, c, l); after > before {
				t.Fatalf("cancel %d raised the level from %d to %d", i, before, after)
			}
		}
	})
}

// level is the bucket's stored level under l's key "k" (0 if none).
func level(t *testing.T, c valkey.Client, l *remote.Limiter) int64 {
	t.Helper()
	v, err := c.Do(context.Background(), c.B().Get().Key(l.Key("k")).Build()).AsBytes()
	if err != nil {
		return 0
	}
	st, err := remote.DecodeState(v)
	if err != nil {
		t.Fatalf("the state no longer decodes: %v", err)
	}
	return st.A
}

// A give-back on a bucket takes units off the top of its level, so the
// places its holes record no longer hold: memstore forgets them, and so
// must the store's give script (else a later cancel frees a run that the
// give took already). Charges, then waiters behind them, then their
// cancels and the charges' give-backs in a random order: after each step
// both tiers hold the same state.
func TestStoreGiveBackForgetsHoles(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 11))
			rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Second, Burst: 4}
			clk := testclock.New(time.Now().Truncate(time.Millisecond))
			loc := memstore.New(memstore.Config{Clock: clk})
			rem := remote.New(c, remote.Config{Clock: clk, Prefix: fmt.Sprintf("giveholes:%s:%d:", alg, seed)})
			remote.SetTTLPad(rem, 24*3600*1000)
			where := fmt.Sprintf("%s seed %d", alg, seed)
			var steps []func() string
			for range 2 { // the bucket full: the waiters queue behind
				n := rule.Capacity() / 2
				at := clk.Now().UnixMilli()
				ld, _ := loc.AllowN(ctx, "k", rule, n)
				rd, err := rem.AllowN(ctx, "k", rule, n)
				if err != nil || ld.Allowed != rd.Allowed {
					t.Fatalf("%s: a charge: local %+v, store %+v, %v", where, ld, rd, err)
				}
				if ld.Allowed {
					steps = append(steps, func() string {
						lg := loc.GiveBack(clk.Now(), "k", rule, memstore.Charge{N: n, At: at, Remaining: ld.Remaining})
						rg, err := rem.GiveBack(ctx, "k", rule, n, at, rd.Remaining)
						if err != nil || lg != rg {
							t.Fatalf("%s: a give-back: local gave %v, store %v, %v", where, lg, rg, err)
						}
						return fmt.Sprintf("give-back of %d (gave %v)", n, lg)
					})
				}
			}
			for i := range 8 {
				n := 1 + rng.Int64N(2)
				lr, _ := loc.ReserveN(clk.Now(), "k", rule, n, time.Time{})
				_, _, rc, err := rem.Reserve(ctx, "k", rule, n, time.Time{})
				if err != nil || rc == nil {
					t.Fatalf("%s: reserve: %v", where, err)
				}
				steps = append(steps, func() string {
					loc.CancelAt(clk.Now(), lr)
					if err := rc(ctx); err != nil {
						t.Fatal(err)
					}
					return fmt.Sprintf("cancel of waiter %d (%d)", i, n)
				})
			}
			rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
			var done []string
			for _, step := range steps {
				done = append(done, step())
				ls, _ := loc.Export("k")
				v, err := c.Do(ctx, c.B().Get().Key(rem.Key("k")).Build()).AsBytes()
				if err != nil {
					t.Fatalf("%s: GET: %v", where, err)
				}
				rs, err := remote.DecodeState(v)
				empty := ls.A == 0 && rs.A == 0 // (memory drops an empty bucket; the store keeps it till its TTL)
				if err != nil || rs.A != ls.A || rs.B != ls.B && !empty {
					t.Fatalf("%s, after %v: local %+v, store %+v, %v", where, done, ls, rs, err)
				}
			}
		}
	}
}
