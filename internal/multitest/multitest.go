// Package multitest checks any ringlimit.MultiLimiter against the contract
// of AllowAll: all or nothing, nothing consumed on a denial or on bad
// input, index 0 shared with AllowN, and exactness under concurrent calls.
// Every tier (local, remote, failover, node) runs the same checks.
package multitest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
)

// T0 is the instant the checks start at, on a minute boundary.
var T0 = time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)

// Limiter is what the checks drive: AllowN and AllowAll of one limiter.
type Limiter interface {
	ringlimit.Limiter
	ringlimit.MultiLimiter
}

// New makes the limiter under test on clk (frozen at T0 unless a check
// moves it). Each call must give a limiter whose keys are fresh: the checks
// use distinct keys, so a shared store is fine if keys do not collide.
type New func(t *testing.T, clk ringlimit.Clock) Limiter

// Algorithms is every algorithm.
var Algorithms = []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket, ringlimit.FixedWindow, ringlimit.SlidingWindow, ringlimit.SlidingLog}

// Rules returns a pair of rules under alg: a tight one (limit small per
// window) and a loose one, as {10 per 1 s, 25 per 10 s} in the issue.
func Rules(alg ringlimit.Algorithm, small, large int64) []ringlimit.Rule {
	return []ringlimit.Rule{
		{Algorithm: alg, Limit: small, Window: time.Second},
		{Algorithm: alg, Limit: large, Window: 10 * time.Second},
	}
}

// Run runs every check as a subtest, for every algorithm. prefix keeps keys
// of several runs on one store apart.
func Run(t *testing.T, prefix string, newL New) {
	t.Run("BadInputRecordsNothing", func(t *testing.T) { badInput(t, prefix, newL) })
	for _, alg := range Algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			p := prefix + alg.String()
			t.Run("NoConsumptionOnDenial", func(t *testing.T) { noConsumptionOnDenial(t, p, alg, newL) })
			t.Run("IndexZeroIsAllowN", func(t *testing.T) { indexZero(t, p, alg, newL) })
			t.Run("ConcurrentAllOrNothing", func(t *testing.T) { concurrent(t, p, alg, newL) })
		})
	}
}

// answer is what a caller sees of a Decision at a frozen instant.
func answer(d ringlimit.Decision) string {
	return fmt.Sprintf("allowed=%v remaining=%d retry=%v", d.Allowed, d.Remaining, d.RetryAfter)
}

func answers(ds []ringlimit.Decision) string {
	s := ""
	for i, d := range ds {
		s += fmt.Sprintf("[%d] %s ", i, answer(d))
	}
	return s
}

// peekAll peeks every rule.
func peekAll(t *testing.T, l Limiter, key string, rules []ringlimit.Rule) []ringlimit.Decision {
	t.Helper()
	ds, err := l.AllowAll(context.Background(), key, rules, 0)
	if err != nil {
		t.Fatalf("peek AllowAll(%q): %v", key, err)
	}
	if len(ds) != len(rules) {
		t.Fatalf("peek AllowAll(%q): %d decisions for %d rules", key, len(ds), len(rules))
	}
	return ds
}

func badInput(t *testing.T, prefix string, newL New) {
	l := newL(t, testclock.New(T0))
	ctx := context.Background()
	key := prefix + "bad"
	good := Rules(ringlimit.FixedWindow, 3, 10)
	if _, err := l.AllowAll(ctx, key, good, 1); err != nil { // a first hit, so "nothing" is visible
		t.Fatal(err)
	}
	before := answers(peekAll(t, l, key, good))
	nine := make([]ringlimit.Rule, ringlimit.MaxRules+1)
	for i := range nine {
		nine[i] = good[0]
	}
	bad := []ringlimit.Rule{good[0], {Algorithm: ringlimit.FixedWindow, Limit: 0, Window: time.Second}}
	cases := []struct {
		name  string
		key   string
		rules []ringlimit.Rule
		n     int64
		want  error
	}{
		{"no rules", key, nil, 1, ringlimit.ErrInvalidRule},
		{"nine rules", key, nine, 1, ringlimit.ErrInvalidRule},
		{"an invalid second rule", key, bad, 1, ringlimit.ErrInvalidRule},
		{"more hits than the second rule holds", key, []ringlimit.Rule{good[1], good[0]}, 4, ringlimit.ErrInvalidHits},
		{"negative hits", key, good, -1, ringlimit.ErrInvalidHits},
		{"empty key", "", good, 1, ringlimit.ErrInvalidKey},
	}
	for _, c := range cases {
		ds, err := l.AllowAll(ctx, c.key, c.rules, c.n)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
		if ds != nil {
			t.Errorf("%s: decisions %v with an error", c.name, ds)
		}
	}
	if after := answers(peekAll(t, l, key, good)); after != before {
		t.Errorf("bad input changed the states:\nbefore %s\nafter  %s", before, after)
	}
}

// noConsumptionOnDenial: exhaust a tight rule at index 1 and at index 0 in
// turn, then a call that the other rule admits must change no state.
func noConsumptionOnDenial(t *testing.T, prefix string, alg ringlimit.Algorithm, newL New) {
	ctx := context.Background()
	l := newL(t, testclock.New(T0))
	for _, order := range []string{"tight second", "tight first"} {
		rules := Rules(alg, 3, 100)
		rules[0], rules[1] = rules[1], rules[0]
		tight := 1
		if order == "tight first" {
			rules[0], rules[1] = rules[1], rules[0]
			tight = 0
		}
		key := prefix + order
		ds, err := l.AllowAll(ctx, key, rules, 3)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range ds {
			if !d.Allowed {
				t.Fatalf("%s: first call denied by rule %d: %s", order, i, answers(ds))
			}
		}
		before := answers(peekAll(t, l, key, rules))
		for _, n := range []int64{1, 2} {
			ds, err = l.AllowAll(ctx, key, rules, n)
			if err != nil {
				t.Fatal(err)
			}
			if ds[tight].Allowed || !ds[1-tight].Allowed {
				t.Fatalf("%s: want only rule %d to deny %d hits: %s", order, tight, n, answers(ds))
			}
			if after := answers(peekAll(t, l, key, rules)); after != before {
				t.Fatalf("%s: a denied call changed the states:\nbefore %s\nafter  %s", order, before, after)
			}
		}
	}
}

// indexZero: AllowN(key, rules[0]) and AllowAll's index 0 are one state;
// AllowN touches no other index.
func indexZero(t *testing.T, prefix string, alg ringlimit.Algorithm, newL New) {
	ctx := context.Background()
	l := newL(t, testclock.New(T0))
	key := prefix + "zero"
	rules := Rules(alg, 10, 25)
	fresh := answers(peekAll(t, l, prefix+"fresh", rules)[1:])
	if _, err := l.AllowN(ctx, key, rules[0], 4); err != nil {
		t.Fatal(err)
	}
	ds := peekAll(t, l, key, rules)
	p, err := l.AllowN(ctx, key, rules[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	if answer(ds[0]) != answer(p) || p.Remaining != 6 {
		t.Fatalf("after AllowN of 4: AllowAll's index 0 %s, AllowN's peek %s (want 6 left)", answer(ds[0]), answer(p))
	}
	if got := answers(ds[1:]); got != fresh {
		t.Fatalf("AllowN touched index 1: %s, want %s", got, fresh)
	}
	if _, err := l.AllowAll(ctx, key, rules, 2); err != nil {
		t.Fatal(err)
	}
	if p, _ = l.AllowN(ctx, key, rules[0], 0); p.Remaining != 4 {
		t.Fatalf("after AllowAll of 2, AllowN's peek has %d left, want 4", p.Remaining)
	}
	if ds = peekAll(t, l, key, rules); ds[1].Remaining != 23 {
		t.Fatalf("after AllowAll of 2, index 1 has %d left, want 23", ds[1].Remaining)
	}
}

// concurrent: goroutines mix AllowAll (n of 1 or 2) and AllowN on index 0
// at one frozen instant. Index 1 must have consumed exactly the hits of the
// admitted AllowAll calls and index 0 those plus the admitted AllowN hits;
// checked against a reference local.Limiter fed those totals one hit at a
// time (each must be admitted: no over-admission), peek for peek.
func concurrent(t *testing.T, prefix string, alg ringlimit.Algorithm, newL New) {
	ctx := context.Background()
	clk := testclock.New(T0)
	l := newL(t, clk)
	key := prefix + "race"
	rules := Rules(alg, 10, 25)
	var mu sync.Mutex
	var all, single int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 12 {
				n := int64(1 + (g+i)%2)
				if g%3 == 2 {
					d, err := l.AllowN(ctx, key, rules[0], 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						single++
						mu.Unlock()
					}
					continue
				}
				ds, err := l.AllowAll(ctx, key, rules, n)
				if err != nil {
					t.Error(err)
					return
				}
				if ds[0].Allowed && ds[1].Allowed {
					mu.Lock()
					all += n
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if all+single == 0 {
		t.Fatal("nothing admitted")
	}
	ref := local.New(local.Config{Clock: clk})
	for i, total := range []int64{all + single, all} {
		for range total {
			if d, _ := ref.AllowN(ctx, fmt.Sprint(i), rules[i], 1); !d.Allowed {
				t.Fatalf("index %d admitted %d hits (all %d, single %d): more than the rule allows", i, total, all, single)
			}
		}
	}
	got := peekAll(t, l, key, rules)
	for i := range rules {
		want, _ := ref.AllowN(ctx, fmt.Sprint(i), rules[i], 0)
		if answer(got[i]) != answer(want) {
			t.Errorf("index %d: %s, want %s (all %d, single %d)", i, answer(got[i]), answer(want), all, single)
		}
	}
}

// Appender is a Limiter that also appends AllowAll's decisions to a slice
// the caller gives it (local and node: their owned path allocates nothing
// when the slice has room).
type Appender interface {
	Limiter
	AppendAll(ctx context.Context, dst []ringlimit.Decision, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error)
}

// Appending is a's AllowAll made through its AppendAll, into a slice that
// already holds one decision and has room for the call's (if room) or not:
// it fails t if that decision changes, if an error returns another slice
// than the one given, or if a slice with room is not the one filled.
func Appending(t *testing.T, a Appender, room bool) Limiter { return &appending{a, t, room} }

type appending struct {
	Appender
	t    *testing.T
	room bool
}

// before is the decision the slice holds before the call.
var before = ringlimit.Decision{Limit: -7, Remaining: -7, Source: ringlimit.Fallback}

func (a *appending) AllowAll(ctx context.Context, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	c := 1
	if a.room {
		c += len(rules)
	}
	dst := make([]ringlimit.Decision, 1, c)
	dst[0] = before
	out, err := a.AppendAll(ctx, dst, key, rules, n)
	switch {
	case len(out) == 0 || out[0] != before:
		a.t.Errorf("AppendAll(%q) lost the decision dst held: %+v", key, out)
	case err != nil && (len(out) != 1 || &out[0] != &dst[0]):
		a.t.Errorf("AppendAll(%q) returned %d decisions with the error %v, want dst as it was", key, len(out)-1, err)
	case err == nil && len(out) != 1+len(rules):
		a.t.Errorf("AppendAll(%q) appended %d decisions for %d rules", key, len(out)-1, len(rules))
	case err == nil && a.room && &out[0] != &dst[0]:
		a.t.Errorf("AppendAll(%q) did not fill the slice with room", key)
	}
	if err != nil {
		return nil, err
	}
	return out[1:], nil
}
