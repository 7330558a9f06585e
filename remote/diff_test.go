package remote_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
	"github.com/valkey-io/valkey-go"
)

type clientT = valkey.Client

var algorithms = []ringlimit.Algorithm{
	ringlimit.TokenBucket, ringlimit.LeakyBucket, ringlimit.FixedWindow,
	ringlimit.SlidingLog, ringlimit.SlidingWindow,
}

// ruleSets are pairs of rules for one algorithm: the sequence mostly uses the
// first and sometimes the second, whose other window makes the key start
// afresh. The big ones sit at the edge of the exact domain.
func ruleSets(alg ringlimit.Algorithm) [][2]ringlimit.Rule {
	r := func(limit int64, w time.Duration, burst int64) ringlimit.Rule {
		return ringlimit.Rule{Algorithm: alg, Limit: limit, Window: w, Burst: burst}
	}
	const day = 24 * time.Hour
	maxDay := int64(ringlimit.MaxCapacityWindow / day.Milliseconds()) // 26,062,... per 24 h
	edge := int64(ringlimit.MaxCapacityWindow)                        // per 1 ms
	if alg == ringlimit.SlidingLog {
		// local's log keeps at most 2^32-1 hits per slot: a call of 2^51
		// hits costs it 2^19 slots (4 MiB), far too slow under -race.
		edge = 1 << 36
	}
	sets := [][2]ringlimit.Rule{
		{r(3, time.Minute, 0), r(3, time.Second, 0)},
		{r(10, time.Second, 5), r(10, 2*time.Second, 3)},
		{r(7, time.Minute, 0), r(7, 10*time.Second, 0)},
		{r(5, 7*time.Millisecond, 9), r(2, 3*time.Millisecond, 0)},
		{r(1, time.Millisecond, 0), r(4, time.Millisecond*13, 2)},
		{r(1_000_000, day, 1_000_000), r(1_000_000, time.Hour, 1_000_000)},
		{r(1_000_000, time.Millisecond, 0), r(999_983, 3*time.Millisecond, 0)},
		{r(maxDay, day, 0), r(1, 12*time.Hour, 0)},
		{r(edge, time.Millisecond, 0), r(3, 1<<20*time.Millisecond, 0)},
		{r(1000, time.Second, 0), r(1000, time.Minute, 0)},
	}
	if alg == ringlimit.TokenBucket || alg == ringlimit.LeakyBucket {
		sets = append(sets, [2]ringlimit.Rule{r(1, day, maxDay), r(3, time.Second, 1<<40)})
	}
	if alg == ringlimit.SlidingLog { // the longest window a log may have
		sets = append(sets, [2]ringlimit.Rule{r(1<<19, ringlimit.MaxLogWindow, 0), r(5, ringlimit.MaxLogWindow, 0)})
	}
	for _, s := range sets {
		for _, rule := range s {
			if err := rule.Validate(); err != nil {
				panic(err)
			}
		}
	}
	return sets
}

// keyModel is what the test knows of a key, to keep the comparison
// deterministic across backward clock jumps (see runDiff).
type keyModel struct {
	written    bool  // state recorded since the last Reset
	until      int64 // a lower bound of the instant its state stops mattering (ms)
	pruneRisk  bool  // sliding log: a call that writes nothing ran since the last write
	resetsDone int
}

// TestDifferential runs random sequences of AllowN, Peek and Reset, with
// forward and backward clock jumps and window changes, through local and
// remote on one manual clock, and requires identical decisions.
func TestDifferential(t *testing.T) {
	_, c := server(t)
	steps := 400
	if testing.Short() {
		steps = 100
	}
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			var calls, allowed, denied, backs int
			for i, rules := range ruleSets(alg) {
				for seed := range 3 {
					st := runDiff(t, c, alg, rules, uint64(i*100+seed), steps)
					calls, allowed, denied, backs = calls+st[0], allowed+st[1], denied+st[2], backs+st[3]
				}
			}
			t.Logf("%s: %d calls, %d admitted, %d denied, %d backward jumps", alg, calls, allowed, denied, backs)
			if allowed == 0 || denied == 0 || backs == 0 {
				t.Errorf("sequences too tame: %d admitted, %d denied, %d backward jumps", allowed, denied, backs)
			}
		})
	}
}

// runDiff runs one random sequence and returns counts of calls, admitted,
// denied and backward jumps.
//
// A key's state is gone once the clock passes its until (the instant it
// stops mattering): local ignores it from then on, and Valkey drops it when
// its TTL runs out. remote's TTLs are padded here, so that the server's own
// clock expires nothing the manual clock still needs, and the test expires
// keys by hand (a Reset on both sides) when the manual clock passes their
// until. Before a backward jump it also Resets keys that may be stale.
func runDiff(t *testing.T, c clientT, alg ringlimit.Algorithm, rules [2]ringlimit.Rule, seed uint64, steps int) [4]int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, uint64(alg)))
	start := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC).Add(time.Duration(rng.IntN(100_000)) * time.Millisecond)
	clk := testclock.New(start)
	loc := local.New(local.Config{Clock: clk})
	rem := remote.New(c, remote.Config{Clock: clk, Prefix: fmt.Sprintf("diff:%d:%d:", alg, seed)})
	remote.SetTTLPad(rem, 24*3600*1000)
	ctx := context.Background()
	keys := []string{"a", "b", "c"}
	models := map[string]*keyModel{}
	for _, k := range keys {
		models[k] = &keyModel{}
	}
	var history []string
	var counts [4]int
	fail := func(format string, args ...any) {
		t.Helper()
		h := history
		if len(h) > 15 {
			h = h[len(h)-15:]
		}
		t.Fatalf("%s seed %d rules %+v:\n%s\n%s", alg, seed, rules, strings.Join(h, "\n"), fmt.Sprintf(format, args...))
	}
	for i := range steps {
		rule := rules[0]
		if rng.IntN(10) == 0 {
			rule = rules[1]
		}
		w := rule.Window
		now := clk.Now()
		// Move the clock.
		switch x := rng.IntN(100); {
		case x < 3: // backward
			back := time.Duration(rng.Int64N(int64(2*w)+1)) + time.Duration(rng.IntN(5))*time.Millisecond
			back = back.Truncate(time.Millisecond)
			for _, k := range keys {
				m := models[k]
				if m.written && (now.UnixMilli() >= m.until || m.pruneRisk) {
					mustReset(t, loc, rem, k)
					*m = keyModel{resetsDone: m.resetsDone + 1}
					history = append(history, fmt.Sprintf("%4d %s reset %s before jump", i, now.Format("01-02 15:04:05.000"), k))
				}
			}
			clk.Set(now.Add(-back))
			counts[3]++
		case x < 25: // stay
		case x < 55:
			clk.Set(now.Add(time.Duration(rng.Int64N(int64(w/10) + 1)).Truncate(time.Millisecond)))
		case x < 85:
			clk.Set(now.Add(time.Duration(rng.Int64N(int64(2*w) + 1)).Truncate(time.Millisecond)))
		case x < 95:
			clk.Set(now.Add(time.Duration(rng.IntN(5)) * time.Millisecond))
		default:
			clk.Set(now.Add(time.Duration(rng.Int64N(int64(5*w) + 1)).Truncate(time.Millisecond)))
		}
		now = clk.Now()
		k := keys[rng.IntN(len(keys))]
		m := models[k]
		if m.written && now.UnixMilli() >= m.until {
			// The state has stopped mattering: local treats it as gone, and
			// in production so does Valkey, where its TTL has run out. The
			// padded TTL keeps it here, so expire it by hand.
			mustReset(t, loc, rem, k)
			*m = keyModel{resetsDone: m.resetsDone + 1}
			history = append(history, fmt.Sprintf("%4d %s expire %s", i, now.Format("01-02 15:04:05.000"), k))
		}
		op := rng.IntN(100)
		if op < 3 {
			mustReset(t, loc, rem, k)
			*m = keyModel{resetsDone: m.resetsDone + 1}
			history = append(history, fmt.Sprintf("%4d %s reset %s", i, now.Format("01-02 15:04:05.000"), k))
			continue
		}
		var n int64
		capacity := rule.Capacity()
		switch x := rng.IntN(10); {
		case op < 13: // Peek, below
		case x < 5:
			n = 1 + rng.Int64N(min(capacity, 3))
		case x < 8:
			n = 1 + rng.Int64N(capacity)
		default: // near the capacity
			n = max(1, capacity-rng.Int64N(min(capacity, 4)))
		}
		var dl, dr ringlimit.Decision
		var el, er error
		what := "allow"
		if op < 8 {
			what = "peek"
			dl, el = loc.Peek(ctx, k, rule)
			dr, er = rem.Peek(ctx, k, rule)
		} else {
			dl, el = loc.AllowN(ctx, k, rule, n)
			dr, er = rem.AllowN(ctx, k, rule, n)
		}
		history = append(history, fmt.Sprintf("%4d %s %s %s n=%d rule=%d/%s/%d -> %+v", i, now.Format("01-02 15:04:05.000"),
			what, k, n, rule.Limit, rule.Window, rule.Burst, dl))
		if el != nil || er != nil {
			fail("errors: local %v, remote %v", el, er)
		}
		dr.Source = dl.Source
		if dl != dr {
			fail("local  %+v\nremote %+v", dl, dr)
		}
		counts[0]++
		if n > 0 && dl.Allowed {
			counts[1]++
			m.written = true
			m.until = now.UnixMilli() + dl.ResetAfter.Milliseconds()
			m.pruneRisk = false
		} else {
			if !dl.Allowed {
				counts[2]++
			}
			if alg == ringlimit.SlidingLog {
				m.pruneRisk = true
			}
		}
	}
	return counts
}

func mustReset(t *testing.T, loc *local.Limiter, rem *remote.Limiter, k string) {
	t.Helper()
	if err := loc.Reset(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	if err := rem.Reset(context.Background(), k); err != nil {
		t.Fatal(err)
	}
}
