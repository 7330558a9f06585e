package remote_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/remote"
)

// TestGiveBackDifferential runs random charges, give-backs of earlier
// charges (with their instant exact or early, as a caller whose clock read
// before the call), peeks and clock steps through internal/memstore and
// the store on one manual clock, and requires the same decisions and the
// same give-backs: the store's script is memstore's give, step for step.
func TestGiveBackDifferential(t *testing.T) {
	_, client := server(t)
	clk := testclock.New(time.UnixMilli(1_765_000_000_000 + 12_345))
	rem := remote.New(client, remote.Config{Clock: clk, Prefix: "give:"})
	remote.SetTTLPad(rem, 3_600_000) // the server's clock expires nothing the manual one needs
	rng := rand.New(rand.NewPCG(42, 7))
	gave := 0
	for _, alg := range algorithms {
		for _, rule := range []ringlimit.Rule{
			{Algorithm: alg, Limit: 7, Window: 10 * time.Second},
			{Algorithm: alg, Limit: 3, Window: 250 * time.Millisecond, Burst: 5},
			{Algorithm: alg, Limit: 1000, Window: time.Second},
		} {
			if alg != ringlimit.TokenBucket && alg != ringlimit.LeakyBucket {
				rule.Burst = 0
			}
			for range 30 {
				gave += giveDiff(t, rem, clk, rng, rule, 60, rule.WindowMillis()/4, nil)
			}
		}
	}
	if gave < 100 {
		t.Fatalf("only %d give-backs gave anything: the test exercises too little", gave)
	}
	t.Logf("%d give-backs gave something", gave)
}

// TestGiveBackDifferentialLongLog: the same on sliding logs long enough
// that the store reclaims their pruned entries (a few bytes a call, so the
// give-backs meet logs in the middle of a move).
func TestGiveBackDifferentialLongLog(t *testing.T) {
	_, client := server(t)
	clk := testclock.New(time.UnixMilli(1_765_000_000_000 + 12_345))
	rem := remote.New(client, remote.Config{Clock: clk, Prefix: "givelog:"})
	remote.SetLogTuning(rem, 3_600_000, 2, 48)
	rng := rand.New(rand.NewPCG(9, 9))
	gave, moving := 0, 0
	movingLog := func(key string) { // the header's moved field (sliding_log.lua) is not 0
		v, _ := client.Do(context.Background(), client.B().Getrange().Key(rem.Key(key)).Start(0).End(72).Build()).ToString()
		if len(v) == 73 && binary.LittleEndian.Uint64([]byte(v[65:])) != 0 {
			moving++
		}
	}
	for range 4 {
		gave += giveDiff(t, rem, clk, rng, ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 60, Window: 400 * time.Millisecond}, 3000, 12, movingLog)
	}
	if gave < 100 || moving < 10 {
		t.Fatalf("%d give-backs gave anything, %d met a log in a move: the test exercises too little", gave, moving)
	}
	t.Logf("%d give-backs gave something, %d met a log in a move", gave, moving)
}

var giveKeys int

// giveDiff runs steps random steps on a new key (clock steps up to step
// ms) and returns how many give-backs gave something.
// before, if not nil, runs before each give-back.
func giveDiff(t *testing.T, rem *remote.Limiter, clk *testclock.Clock, rng *rand.Rand, rule ringlimit.Rule, steps int, step int64, before func(key string)) int {
	t.Helper()
	type charge struct{ n, at, remaining int64 }
	ctx := context.Background()
	giveKeys++
	key := rule.Algorithm.String() + "-" + strconv.Itoa(giveKeys)
	mem := memstore.New(memstore.Config{})
	var charges []charge
	gave := 0
	for i := range steps {
		now := clk.Now()
		switch op := rng.IntN(10); {
		case op < 4: // a charge
			n := 1 + rng.Int64N(min(3, rule.Capacity()))
			dm, errm := mem.AllowNAt(now, key, rule, n)
			dr, errr := rem.AllowN(ctx, key, rule, n)
			if errm != nil || errr != nil {
				t.Fatalf("%s %+v step %d: %v / %v", key, rule, i, errm, errr)
			}
			dr.Source = dm.Source
			if dm != dr {
				t.Fatalf("%s %+v step %d: charge %d: memstore %+v, store %+v", key, rule, i, n, dm, dr)
			}
			if dm.Allowed {
				charges = append(charges, charge{n, now.UnixMilli(), dm.Remaining})
			}
		case op < 7 && len(charges) > 0: // a give-back
			c := charges[len(charges)-1] // mostly the last (a request refused by its next limit)
			if rng.IntN(3) == 0 {
				c = charges[rng.IntN(len(charges))]
			}
			at := c.at - rng.Int64N(3) // exact, or a little early
			gm := mem.GiveBack(now, key, rule, memstore.Charge{N: c.n, At: at, Remaining: c.remaining})
			if before != nil {
				before(key)
			}
			gr, err := rem.GiveBack(ctx, key, rule, c.n, at, c.remaining)
			if err != nil {
				t.Fatal(err)
			}
			// (A sliding window whose weight has faded to nothing is gone
			// from memstore but still in the store for the test's TTL
			// pad: the store's give then changes nothing that decides,
			// which the peeks check.)
			if gm != gr && rule.Algorithm != ringlimit.SlidingWindow {
				t.Fatalf("%s %+v step %d: give back %+v (at %d): memstore %v, store %v", key, rule, i, c, at, gm, gr)
			}
			if gm {
				gave++
			}
		default: // the clock moves on
			clk.Advance(time.Duration(rng.Int64N(step+1)) * time.Millisecond)
		}
		now = clk.Now()
		dm, _ := mem.AllowNAt(now, key, rule, 0)
		dr, err := rem.AllowN(ctx, key, rule, 0)
		if err != nil {
			t.Fatal(err)
		}
		dr.Source = dm.Source
		if dm != dr {
			t.Fatalf("%s %+v step %d: peek: memstore %+v, store %+v", key, rule, i, dm, dr)
		}
	}
	return gave
}

// TestGiveBackBadValue: a key holding a value the scripts did not write
// is answered ErrBadValue and left as it is.
func TestGiveBackBadValue(t *testing.T) {
	_, client := server(t)
	ctx := context.Background()
	l := remote.New(client, remote.Config{})
	for _, alg := range algorithms {
		rule := ringlimit.Rule{Algorithm: alg, Limit: 5, Window: time.Minute}
		if err := client.Do(ctx, client.B().Set().Key(l.Key("foreign")).Value("not ours").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.GiveBack(ctx, "foreign", rule, 1, time.Now().UnixMilli(), 4); !errors.Is(err, remote.ErrBadValue) {
			t.Fatalf("%s: %v, want ErrBadValue", alg, err)
		}
		if v, _ := client.Do(ctx, client.B().Get().Key(l.Key("foreign")).Build()).ToString(); v != "not ours" {
			t.Fatalf("%s: the value became %q", alg, v)
		}
	}
	if _, err := l.GiveBack(ctx, "k", ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Minute}, 6, 0, 0); !errors.Is(err, ringlimit.ErrInvalidHits) {
		t.Fatalf("6 hits of 5: %v, want ErrInvalidHits", err)
	}
}

// FuzzParseGive: the give script's reply, from a store that is not
// trusted, either decodes to at most the hits given (a bucket's units) or
// is an error wrapping ErrBadReply or ErrBadValue; never a panic.
func FuzzParseGive(f *testing.F) {
	le := func(v int64) string { return string(binary.LittleEndian.AppendUint64(nil, uint64(v))) }
	f.Add(le(0), uint8(2), int64(3))
	f.Add(le(3), uint8(3), int64(3))
	f.Add(le(3*60_000), uint8(0), int64(3))
	f.Add(le(-1), uint8(1), int64(1))
	f.Add("bad value", uint8(4), int64(1))
	f.Add("short", uint8(4), int64(1))
	f.Fuzz(func(t *testing.T, v string, alg uint8, n int64) {
		rule := ringlimit.Rule{Algorithm: ringlimit.Algorithm(alg % 5), Limit: 10, Window: time.Minute}
		if n < 1 || n > 10 {
			n = 1
		}
		g, err := remote.ParseGive(v, rule, n)
		if err != nil {
			if !errors.Is(err, remote.ErrBadReply) && !errors.Is(err, remote.ErrBadValue) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			return
		}
		most := n
		if rule.Algorithm == ringlimit.TokenBucket || rule.Algorithm == ringlimit.LeakyBucket {
			most *= 60_000
		}
		if g < 0 || g > most || len(v) != 8 {
			t.Fatalf("%q decoded to %d of at most %d", v, g, most)
		}
	})
}

// BenchmarkGiveBack is one give-back round trip of a fixed window's
// charge, one caller.
func BenchmarkGiveBack(b *testing.B) {
	_, client := server(b)
	ctx := context.Background()
	l := remote.New(client, remote.Config{})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1_000_000, Window: time.Hour}
	d, err := l.AllowN(ctx, "k", rule, 500_000)
	if err != nil || !d.Allowed {
		b.Fatal(d, err)
	}
	at := time.Now().UnixMilli()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.GiveBack(ctx, "k", rule, 1, at, d.Remaining); err != nil {
			b.Fatal(err)
		}
	}
}
