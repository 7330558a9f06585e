package chaoskit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

var errDown = errors.New("taken down")

// counts is a fake cluster's state: admissions per key, shared by its
// nodes, so every key admits exactly the limit.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

// fakeNode answers from counts; the first call for dieOn takes it down
// (as the harness would, during the call) and fails.
type fakeNode struct {
	chaoskit.Switch
	name  string
	dieOn string
	died  atomic.Bool
	state *counts
}

func (f *fakeNode) Name() string { return f.name }

func (f *fakeNode) Allow(ctx context.Context, key string, r chaoskit.Rule) (chaoskit.Decision, error) {
	if key == f.dieOn && f.died.CompareAndSwap(false, true) {
		f.Off()
		return chaoskit.Decision{}, errDown
	}
	f.state.mu.Lock()
	defer f.state.mu.Unlock()
	f.state.n[key]++
	return chaoskit.Decision{Allowed: f.state.n[key] <= r.Limit, Source: "local"}, nil
}

// errorsTB records Errorf instead of failing the test.
type errorsTB struct {
	testing.TB
	errs []string
}

func (e *errorsTB) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// poll waits up to 10s for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
}

// TestLoad runs the load on two fake nodes, one of which the harness
// "takes down" during a call that then fails: that error is the harness's
// (DeadErrs) unless Excused says otherwise (Errs).
func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name     string
		excused  func(error) bool
		errs     int
		deadErrs int
	}{
		{"excused by default", nil, 0, 1},
		{"excused", func(err error) bool { return errors.Is(err, errDown) }, 0, 1},
		{"not excused", func(err error) bool { return !errors.Is(err, errDown) }, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &counts{n: map[string]int{}}
			n1 := &fakeNode{name: "n1", state: st}
			n2 := &fakeNode{name: "n2", dieOn: "die", state: st}
			n1.On()
			n2.On()
			cfg := chaoskit.LoadConfig{
				Rule:    chaoskit.Rule{Algorithm: "sliding_log", Limit: 5, Window: time.Hour},
				Workers: 2, Tick: time.Millisecond, MaxCalls: 100_000, MaxTime: time.Minute,
				Excused: tc.excused,
			}
			start := time.Now()
			l := chaoskit.StartLoad(cfg, []chaoskit.Target{n1, n2}, []string{"a", "b", "die"})
			defer l.Stop()
			poll(t, "300 calls with n2 down", func() bool {
				up, _ := n2.Live()
				return !up && l.Snapshot().Calls >= 300
			})
			l.SetKeys([]string{"c"})
			poll(t, "calls on the new key set", func() bool { return l.Snapshot().PerKey["c"] != nil })
			res := l.Stop()
			if again := l.Stop(); again != res || l.Snapshot().Calls != res.Calls {
				t.Errorf("the result changed after Stop")
			}

			if res.Errs != tc.errs || res.DeadErrs != tc.deadErrs || len(res.ErrSamples) != tc.errs {
				t.Errorf("errs %d, dead errs %d, samples %q; want %d, %d", res.Errs, res.DeadErrs, res.ErrSamples, tc.errs, tc.deadErrs)
			}
			if res.DeadCalls < 1 {
				t.Errorf("dead calls %d, want at least the one that took n2 down", res.DeadCalls)
			}
			answered := 0
			for _, k := range []string{"a", "b", "die", "c"} {
				ks := res.PerKey[k]
				if ks == nil {
					t.Fatalf("key %s: no calls", k)
				}
				answered += ks.Attempts
				want := min(ks.Attempts, cfg.Rule.Limit)
				by := 0
				for _, v := range ks.AllowedBy {
					by += v
				}
				if ks.Allowed != want || by != want || ks.AllowedFrom["local"] != want || len(ks.Admits) != want {
					t.Errorf("key %s: %d calls, admitted %d (by node %v, by source %v, %d admission times); want %d",
						k, ks.Attempts, ks.Allowed, ks.AllowedBy, ks.AllowedFrom, len(ks.Admits), want)
				}
				if ks.First.Before(start) || ks.Last.Before(ks.First) {
					t.Errorf("key %s: first %v, last %v, load started %v", k, ks.First, ks.Last, start)
				}
			}
			if res.Sources["local"] != answered || res.Calls != answered+res.Errs+res.DeadErrs {
				t.Errorf("calls %d, sources %v; %d answered", res.Calls, res.Sources, answered)
			}
			all := res.Latencies(time.Time{}, time.Now())
			if len(all) != res.Calls-res.DeadCalls || !slices.IsSorted(all) {
				t.Errorf("%d latencies (sorted: %v); want one per call to a node that stayed up, %d", len(all), slices.IsSorted(all), res.Calls-res.DeadCalls)
			}
			if d := l.FirstSource(start, 0, "store", "local"); d < 0 {
				t.Errorf("FirstSource(local) = %s", d)
			}
			if d := l.FirstSource(start, 20*time.Millisecond, "store"); d != -1 {
				t.Errorf("FirstSource(store) = %s, want -1", d)
			}

			var r chaoskit.Row
			tb := &errorsTB{TB: t}
			got := r.Report(tb, res, start, time.Now())
			if r.Calls != res.Calls || r.Errs != res.Errs || r.DeadCalls != res.DeadCalls || r.DeadErrs != res.DeadErrs ||
				r.Sources["local"] != answered || len(got) != len(all) || r.Max != all[len(all)-1] || r.P50 > r.P99 || r.P99 > r.Max {
				t.Errorf("Report: %+v", r)
			}
			if (len(tb.errs) > 0) != (res.Errs > 0) {
				t.Errorf("Report with %d caller errors said %q", res.Errs, tb.errs)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0, 1}, {0.5, 5}, {0.99, 9}, {1, 10}} {
		if got := chaoskit.Percentile(d, c.p); got != c.want {
			t.Errorf("Percentile(1..10, %v) = %d, want %d", c.p, got, c.want)
		}
	}
	if got := chaoskit.Percentile(nil, 0.5); got != 0 {
		t.Errorf("Percentile(nil) = %d", got)
	}
}

func TestMakeKeys(t *testing.T) {
	names := []string{"n1", "n2", "n3"}
	keys, owner := chaoskit.MakeKeys("TestMakeKeys", names, 4)
	r := ring.New(names, 0)
	per := map[string]int{}
	for _, k := range keys {
		if owner[k] != r.Owner(k) {
			t.Errorf("key %s: owner %q, the ring says %q", k, owner[k], r.Owner(k))
		}
		per[owner[k]]++
	}
	if len(keys) != 12 || len(owner) != 12 || per["n1"] != 4 || per["n2"] != 4 || per["n3"] != 4 {
		t.Errorf("%d keys, %d owners, per node %v; want 4 each of 3", len(keys), len(owner), per)
	}
}

// offAfterLook is a node the harness takes down just after the load found
// it up (right after the first Live that reports it on) and before the call
// reaches it, which then fails: the kill of a churn run landing between a
// worker's choice of target and its call.
type offAfterLook struct {
	chaoskit.Switch
	looked atomic.Bool
}

func (o *offAfterLook) Name() string { return "n1" }

func (o *offAfterLook) Live() (bool, uint64) {
	up, epoch := o.Switch.Live()
	if up && o.looked.CompareAndSwap(false, true) {
		o.Off()
	}
	return up, epoch
}

func (o *offAfterLook) Allow(context.Context, string, chaoskit.Rule) (chaoskit.Decision, error) {
	if up, _ := o.Switch.Live(); up {
		return chaoskit.Decision{Allowed: true, Source: "local"}, nil
	}
	return chaoskit.Decision{}, errDown // killed: EOF
}

// A call to a node taken down after the load chose it is the harness's
// doing: the load once read the node's epoch apart from the choice, after
// the Off, and counted the failed call as a caller error.
func TestLoadDownAfterChoice(t *testing.T) {
	n := &offAfterLook{}
	n.On()
	cfg := chaoskit.LoadConfig{
		Rule:    chaoskit.Rule{Algorithm: "sliding_log", Limit: 5, Window: time.Hour},
		Workers: 1, Tick: time.Millisecond, MaxCalls: 1, MaxTime: time.Minute,
	}
	l := chaoskit.StartLoad(cfg, []chaoskit.Target{n}, []string{"a"})
	poll(t, "the one call", func() bool { return l.Snapshot().Calls == 1 })
	res := l.Stop()
	if res.Errs != 0 || res.DeadErrs != 1 || res.DeadCalls != 1 {
		t.Errorf("errs %d (%q), dead errs %d, dead calls %d; want 0, 1, 1", res.Errs, res.ErrSamples, res.DeadErrs, res.DeadCalls)
	}
}
