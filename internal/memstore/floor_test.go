package memstore_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
)

// A token bucket leases whether or not it is near its limit: a full bucket
// grants a lease, and while the lease is out the holder's own bucket holds
// that many tokens fewer (its floor), so refill does not take it past the
// capacity less the lease. The lease's end (its tokens given back, or none
// of them, and its floor released) gives the room back; a give-back after
// the floor ended gives nothing (the bucket refilled into that room).
// (Before, a bucket declined while it could fill up within the lease's
// life: a full one never leased.)
func TestLeaseTokenBucketUnderItsLimit(t *testing.T) {
	l := memstore.New(memstore.Config{})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1000, Window: time.Second} // a token a ms
	now := time.UnixMilli(1_000_000_000)
	g, err := l.Lease(now, "k", rule, 10, 100*time.Millisecond)
	if err != nil || g.N != 10 || g.Life != 100*time.Millisecond || g.Floor == 0 {
		t.Fatalf("a full bucket's lease: %+v, %v; want 10 tokens for 100 ms, with a floor", g, err)
	}
	steps := []struct {
		at   time.Duration // after now
		do   func(at time.Time)
		want int64 // Remaining then
	}{
		{0, nil, 990},
		{50 * time.Millisecond, nil, 990},  // full less the lease: refill stops at the floor
		{119 * time.Millisecond, nil, 990}, // the floor stands for the life and a fifth (120 ms) ...
		{119 * time.Millisecond, func(at time.Time) { l.AllowNAt(at, "k", rule, 100) }, 890},
		{200 * time.Millisecond, nil, 971},                                                   // ... and no longer: the level drains on from the floor's end
		{200 * time.Millisecond, func(at time.Time) { l.Return(at, "k", rule, g, 10) }, 971}, // so a give-back now gives nothing
		{300 * time.Millisecond, nil, 1000},
	}
	for i, s := range steps {
		at := now.Add(s.at)
		if s.do != nil {
			s.do(at)
		}
		if got := remaining(t, l, at, "k", rule); got != s.want {
			t.Fatalf("step %d at +%s: remaining %d, want %d", i, s.at, got, s.want)
		}
	}

	// Given back while its floor stands: the unused tokens come back at
	// once, the floor falls by the whole lease (4 were spent: they refill).
	now = now.Add(time.Second)
	g, _ = l.Lease(now, "k", rule, 10, 100*time.Millisecond)
	g2, _ := l.Lease(now, "k", rule, 10, 100*time.Millisecond)
	if g.N != 10 || g2.N != 10 || g.Floor != g2.Floor {
		t.Fatalf("two leases of a full bucket: %+v, %+v; want 10 each, in one floor", g, g2)
	}
	at := now.Add(30 * time.Millisecond)
	l.Return(at, "k", rule, g, 6)
	if got := remaining(t, l, at, "k", rule); got != 986 {
		t.Fatalf("6 given back of a lease of 10, the other lease out: remaining %d, want 986", got)
	}
	if got := remaining(t, l, at.Add(20*time.Millisecond), "k", rule); got != 990 {
		t.Fatalf("20 ms later: remaining %d, want 990 (the other lease's floor)", got)
	}
	l.Return(at, "k", rule, g, 6) // (twice: its floor fell already; node's ledger gives one back once)
	l.Return(at.Add(20*time.Millisecond), "k", rule, g2, 0)
	if got := remaining(t, l, at.Add(30*time.Millisecond), "k", rule); got != 1000 {
		t.Fatalf("every lease released: remaining %d, want 1000", got)
	}
	if g, _ := l.Lease(now, "other", rule, 10, 100*time.Millisecond); g.Floor == g2.Floor {
		t.Fatal("another key's lease counts in the same floor")
	}
}

// holderModel drives a token-bucket key's holder and its borrowers through
// a random sequence (the holder's own calls, grants, borrowers spending
// their leases, give-backs, recalls, leases that expire unused, are
// released late or never, the state moving to another holder, and idle
// spans that refill the bucket to full) and checks every hit any of them
// admitted against one bucket given the same admitted calls at the same
// instants: that bucket must admit each (what they admit together never
// exceeds one bucket). It returns the hits admitted and the leases
// granted.
func holderModel(t *testing.T, seed uint64, rule ringlimit.Rule, steps int) (admitted, granted int64) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	const key = "hot"
	ttl := time.Duration(20+rng.IntN(200)) * time.Millisecond
	now := time.UnixMilli(1_700_000_000_000)
	clk := ptrClock{&now}
	holder := memstore.New(memstore.Config{Clock: clk})
	ref := memstore.New(memstore.Config{Clock: clk})
	type lease struct {
		g       memstore.Grant
		at      *memstore.Limiter // the holder that granted it
		left    int64
		expired bool
	}
	var out []*lease
	var trace []string
	logf := func(format string, args ...any) {
		trace = append(trace, fmt.Sprintf("+%d ms: ", now.UnixMilli()-1_700_000_000_000)+fmt.Sprintf(format, args...))
	}
	check := func(who string, n int64) {
		t.Helper()
		if d, _ := ref.AllowNAt(now, key, rule, n); !d.Allowed {
			for _, l := range trace[max(0, len(trace)-40):] {
				t.Log(l)
			}
			t.Fatalf("seed %d: %s admitted %d at +%d ms that one bucket denies (%d admitted before)", seed, who, n, now.UnixMilli()-1_700_000_000_000, admitted)
		}
		admitted += n
		hd, _ := holder.AllowNAt(now, key, rule, 0)
		rd, _ := ref.AllowNAt(now, key, rule, 0)
		logf("%s admitted %d: holder has %d, one bucket %d", who, n, hd.Remaining, rd.Remaining)
	}
	give := func(i int, left int64) {
		b := out[i]
		b.at.Return(now, key, rule, b.g, left)
		out = append(out[:i], out[i+1:]...)
	}
	for range steps {
		switch k := rng.IntN(100); {
		case k < 30: // time passes; sometimes long enough to fill up
			d := time.Duration(rng.IntN(40)) * time.Millisecond
			if rng.IntN(20) == 0 {
				d = rule.Window + time.Duration(rng.IntN(500))*time.Millisecond
			}
			now = now.Add(d)
			for _, b := range out {
				if !now.Before(b.g.At.Add(b.g.Life)) {
					b.expired = true // the borrower decides nothing from it now
				}
			}
		case k < 50: // the holder's own calls: some, or all it has
			n := 1 + rng.Int64N(rule.Capacity()/20+1)
			if rng.IntN(3) == 0 {
				d, _ := holder.AllowNAt(now, key, rule, 0)
				n = max(1, d.Remaining)
			}
			if d, _ := holder.AllowNAt(now, key, rule, n); d.Allowed {
				check("the holder", n)
			}
		case k < 62: // a grant
			want := 1 + rng.Int64N(rule.Capacity()/10+1)
			g, err := holder.Lease(now, key, rule, want, ttl)
			if err != nil {
				t.Fatal(err)
			}
			logf("lease %+v", g)
			if g.N > 0 {
				granted++
				out = append(out, &lease{g: g, at: holder, left: g.N})
			}
		case k < 82: // a borrower spends from its lease
			if len(out) == 0 {
				continue
			}
			b := out[rng.IntN(len(out))]
			if b.expired || b.left == 0 {
				continue
			}
			n := 1 + rng.Int64N(b.left)
			b.left -= n
			check("a borrower", n)
		case k < 92: // given back, recalled (the same, for the holder), or released once expired
			if len(out) == 0 {
				continue
			}
			i := rng.IntN(len(out))
			left := out[i].left
			if out[i].expired && rng.IntN(2) == 0 {
				left = 0 // the sweep's release of a lease whose give-back never came
			}
			logf("give back %d of %+v", left, out[i].g)
			out[i].left = 0
			give(i, left)
		case k < 94: // stranded: its borrower crashed; nothing ever comes back
			if len(out) > 0 {
				i := rng.IntN(len(out))
				logf("stranded %d of %+v", out[i].left, out[i].g)
				out[i].left = 0
				out = append(out[:i], out[i+1:]...)
			}
		case k < 96: // the state moves to another holder; the leases out stay with their borrowers
			next := memstore.New(memstore.Config{Clock: clk})
			if st, ok := holder.Take(key); ok {
				next.Import(key, st)
			}
			holder = next
			logf("moved")
		case k < 98: // the holder peeks, waits or gives a charge back
			d, _ := holder.AllowNAt(now, key, rule, 1)
			if d.Allowed {
				check("the holder", 1)
				if rng.IntN(2) == 0 && holder.GiveBack(now, key, rule, memstore.Charge{N: 1, At: now.UnixMilli(), Remaining: d.Remaining}) {
					admitted--
					ref.GiveBack(now, key, rule, memstore.Charge{N: 1, At: now.UnixMilli(), Remaining: d.Remaining})
				}
			}
		default: // a Reset of a key at rest: nothing out (node revokes the leases first)
			if len(out) == 0 {
				holder.Reset(ctx, key)
				ref.Reset(ctx, key)
				logf("reset")
			}
		}
	}
	return admitted, granted
}

// What a token bucket's holder and its borrowers admit together never
// exceeds one bucket given the same calls, through refill to full,
// give-backs, recalls, expiry, stranded leases and moves, and it leases
// while far under its limit.
func TestLeasedTokenBucketIsExact(t *testing.T) {
	rules := []ringlimit.Rule{
		{Algorithm: ringlimit.TokenBucket, Limit: 1000, Window: time.Second},
		{Algorithm: ringlimit.TokenBucket, Limit: 100, Window: time.Second, Burst: 1000},
		{Algorithm: ringlimit.TokenBucket, Limit: 7, Window: 100 * time.Millisecond, Burst: 300},
		{Algorithm: ringlimit.TokenBucket, Limit: 1_000_000, Window: time.Minute},
	}
	for i, rule := range rules {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			var admitted, granted int64
			for seed := range uint64(300) {
				a, g := holderModel(t, seed, rule, 400)
				admitted += a
				granted += g
			}
			t.Logf("%+v: %d admitted, %d leases granted", rule, admitted, granted)
			if granted == 0 {
				t.Fatal("no lease granted")
			}
		})
	}
}

// A state that leaves while leases are out carries its floor folded into
// its level: the holder it goes to fills no further than the capacity
// less the leases until they have ended, then to the capacity.
func TestLeasedTokenBucketMoves(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1000, Window: time.Second}
	now := time.UnixMilli(1_000_000_000)
	a := memstore.New(memstore.Config{Clock: fixedClock{now}})
	g, _ := a.Lease(now, "k", rule, 10, 100*time.Millisecond)
	if g.N != 10 {
		t.Fatalf("leased %d, want 10", g.N)
	}
	st, ok := a.Take("k")
	if !ok {
		t.Fatal("no state to take")
	}
	b := memstore.New(memstore.Config{Clock: fixedClock{now}})
	b.Import("k", st)
	for _, c := range []struct {
		after time.Duration
		most  int64
	}{{0, 990}, {60 * time.Millisecond, 990}, {119 * time.Millisecond, 990}} {
		if got := remaining(t, b, now.Add(c.after), "k", rule); got > c.most {
			t.Fatalf("+%s at the new holder: remaining %d, want at most %d (the lease may still be spent)", c.after, got, c.most)
		}
	}
	if got := remaining(t, b, now.Add(time.Second), "k", rule); got != 1000 {
		t.Fatalf("a second later: remaining %d, want 1000", got)
	}
	a.Return(now, "k", rule, g, 10) // (the state left: nothing comes back there)
	if a.Has("k") {
		t.Fatal("a give-back brought a state back to the holder it left")
	}
}

type ptrClock struct{ t *time.Time }

func (c ptrClock) Now() time.Time { return *c.t }

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }
