package remote_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/multitest"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/remote"
)

func TestAllowAllContract(t *testing.T) {
	_, c := server(t)
	runs := 0
	multitest.Run(t, "", func(_ *testing.T, clk ringlimit.Clock) multitest.Limiter {
		runs++
		return remote.New(c, remote.Config{Prefix: fmt.Sprintf("m%d:", runs), Clock: clk})
	})
}

// Index 0 is the very value AllowN writes at Key(key); index i > 0 lives at
// IndexKey(key, i), in the key's slot; Reset deletes them all.
func TestAllowAllKeys(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Clock: testclock.New(multitest.T0)})
	rules := multitest.Rules(ringlimit.SlidingLog, 5, 20)
	rules = append(rules, ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 3, Window: 1e9})
	if _, err := l.AllowAll(ctx, "k", rules, 2); err != nil {
		t.Fatal(err)
	}
	if got, want := l.IndexKey("k", 2), "rl:{k}#2"; got != want {
		t.Fatalf("IndexKey: %q, want %q", got, want)
	}
	for i := range rules {
		n, err := c.Do(ctx, c.B().Exists().Key(l.IndexKey("k", i)).Build()).AsInt64()
		if err != nil || n != 1 {
			t.Fatalf("index %d: %s exists %d, %v", i, l.IndexKey("k", i), n, err)
		}
	}
	if d, _ := l.AllowN(ctx, "k", rules[0], 0); d.Remaining != 3 {
		t.Fatalf("AllowN sees %d left at index 0, want 3", d.Remaining)
	}
	if s, _, ok, err := l.LoadState(ctx, "k"); err != nil || !ok || s.Algorithm != ringlimit.SlidingLog || len(s.Log) != 1 || s.Log[0].Count != 2 {
		t.Fatalf("LoadState: %+v %v %v", s, ok, err)
	}
	if err := l.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Do(ctx, c.B().Dbsize().Build()).AsInt64(); n != 0 {
		t.Fatalf("%d keys after Reset", n)
	}
}

// WriteStates writes a state's More at their own indexes, each with its
// TTL offset by its Until, where AllowAll finds them; a More that has
// stopped mattering when the head's TTL says is now is skipped.
func TestWriteStatesWritesMore(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	clk := testclock.New(multitest.T0)
	l := remote.New(c, remote.Config{Clock: clk})
	now := multitest.T0.UnixMilli()
	rules := multitest.Rules(ringlimit.FixedWindow, 10, 25)
	head := remote.State{Algorithm: ringlimit.FixedWindow, Window: 1000, A: now / 1000, B: 4, Until: now + 1000,
		More: []remote.State{
			{Algorithm: ringlimit.FixedWindow, Window: 10000, Index: 1, A: now / 10000, B: 7, Until: now + 10000},
			{Algorithm: ringlimit.FixedWindow, Window: 10000, Index: 2, A: now / 10000, B: 1, Until: now - 1},
		}}
	if err := l.WriteStates(ctx, []remote.KeyState{{Key: "k", State: head, TTL: time.Second}}); err != nil {
		t.Fatal(err)
	}
	ds, err := l.AllowAll(ctx, "k", rules, 0)
	if err != nil || ds[0].Remaining != 6 || ds[1].Remaining != 18 {
		t.Fatalf("AllowAll after WriteStates: %+v, %v; want 6 and 18 left", ds, err)
	}
	ttl, err := c.Do(ctx, c.B().Pttl().Key(l.IndexKey("k", 1)).Build()).AsInt64()
	if err != nil || ttl <= 9_000 || ttl > 10_000 {
		t.Fatalf("index 1's TTL %d ms, want the head's second plus 9 s", ttl)
	}
	if n, _ := c.Do(ctx, c.B().Exists().Key(l.IndexKey("k", 2)).Build()).AsInt64(); n != 0 {
		t.Fatal("a state past its Until was written")
	}
}

// A value not ours at any index answers ErrBadValue, and nothing is written.
func TestAllowAllBadValue(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Clock: testclock.New(multitest.T0)})
	rules := multitest.Rules(ringlimit.TokenBucket, 10, 25)
	if err := c.Do(ctx, c.B().Hset().Key(l.IndexKey("k", 1)).FieldValue().FieldValue("f", "v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowAll(ctx, "k", rules, 1); !errors.Is(err, ringlimit.ErrBadValue) {
		t.Fatalf("a hash at index 1: %v, want ErrBadValue", err)
	}
	if n, _ := c.Do(ctx, c.B().Exists().Key(l.IndexKey("k", 0)).Build()).AsInt64(); n != 0 {
		t.Fatal("index 0 was written beside a bad value")
	}
}

// AllowAll's script reads each bucket's or window's state with one
// GETRANGE of at most 73 bytes and nothing else, whether it is there or not
// (a GETRANGE tells another type from an absent key by its error; MGET
// answers nil for both, which then took an EXISTS; a GET would copy a long
// sliding log found under the key), and writes each with one SET; a split
// call writes nothing, and its admitting rules decide again as peeks on the
// values already read.
func TestAllowAllCommands(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Clock: testclock.New(multitest.T0)})
	count := func() map[string]int64 {
		out := map[string]int64{}
		for name, st := range commandStats(t, c) {
			out[name] = st.calls
		}
		return out
	}
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket, ringlimit.FixedWindow, ringlimit.SlidingWindow} {
		rules := []ringlimit.Rule{{Algorithm: alg, Limit: 1, Window: time.Minute}, {Algorithm: alg, Limit: 10, Window: time.Hour}}
		key := "k-" + alg.String()
		for _, step := range []struct {
			what       string
			gets, sets int64
		}{
			{"absent states", 2, 2},
			{"a split call", 2, 0}, // rule 0 denies, rule 1 reports as a peek
		} {
			before := count()
			if _, err := l.AllowAll(ctx, key, rules, 1); err != nil {
				t.Fatal(err)
			}
			after := count()
			if got := after["getrange"] - before["getrange"]; got != step.gets {
				t.Errorf("%s, %s: %d GETRANGEs, want %d", alg, step.what, got, step.gets)
			}
			if got := after["set"] - before["set"]; got != step.sets {
				t.Errorf("%s, %s: %d SETs, want %d", alg, step.what, got, step.sets)
			}
			for _, cmd := range []string{"get", "mget", "exists", "strlen"} {
				if got := after[cmd] - before[cmd]; got != 0 {
					t.Errorf("%s, %s: %d %s, want none", alg, step.what, got, strings.ToUpper(cmd))
				}
			}
		}
	}
}

// A value not ours at either index of two rules, under every pair of
// algorithms (a sliding log's held writes included), answers ErrBadValue
// and writes nothing: the other index stays absent, the bad value as it was.
func TestAllowAllBadValueAnyIndex(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Clock: testclock.New(multitest.T0)})
	ours := func(alg ringlimit.Algorithm) string { // a value of ours, cut short
		v := remote.EncodeState(remote.State{Algorithm: alg, Window: 1000, A: 1, B: 1})
		return string(v[:len(v)-1])
	}
	n := 0
	for _, a := range algorithms {
		for _, b := range algorithms {
			rules := []ringlimit.Rule{{Algorithm: a, Limit: 5, Window: time.Second}, {Algorithm: b, Limit: 50, Window: time.Minute}}
			for bad := range 2 {
				for _, v := range []string{"not ours", ours(rules[bad].Algorithm), ""} {
					n++
					key := fmt.Sprintf("k%d", n)
					badKey, other := l.IndexKey(key, bad), l.IndexKey(key, 1-bad)
					put := c.B().Set().Key(badKey).Value(v).Build()
					if v == "" { // another type
						put = c.B().Rpush().Key(badKey).Element("x").Build()
					}
					if err := c.Do(ctx, put).Error(); err != nil {
						t.Fatal(err)
					}
					if _, err := l.AllowAll(ctx, key, rules, 1); !errors.Is(err, ringlimit.ErrBadValue) {
						t.Fatalf("%s, %s, %q at index %d: %v, want ErrBadValue", a, b, v, bad, err)
					}
					if got, _ := c.Do(ctx, c.B().Exists().Key(other).Build()).AsInt64(); got != 0 {
						t.Errorf("%s, %s, %q at index %d: index %d written", a, b, v, bad, 1-bad)
					}
					if v != "" {
						if got, _ := c.Do(ctx, c.B().Get().Key(badKey).Build()).ToString(); got != v {
							t.Errorf("%s, %s, %q at index %d: now %q", a, b, v, bad, got)
						}
					}
				}
			}
		}
	}
}
