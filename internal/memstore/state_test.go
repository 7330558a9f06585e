package memstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/testclock"
)

// A state taken from one limiter and imported into another decides there
// exactly as it would have where it was, for every algorithm.
func TestTakeImportCarriesTheState(t *testing.T) {
	for _, alg := range allAlgorithms {
		clk := testclock.New(t0)
		a := memstore.New(memstore.Config{Clock: clk})
		b := memstore.New(memstore.Config{Clock: clk})
		twin := memstore.New(memstore.Config{Clock: clk}) // keeps the state where it was
		rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Minute}
		for range 7 {
			a.AllowN(ctx, "k", rule, 1)
			twin.AllowN(ctx, "k", rule, 1)
			clk.Advance(time.Millisecond)
		}
		want, _ := a.Peek(ctx, "k", rule)
		s, ok := a.Take("k")
		if !ok || s.Algorithm != alg || s.Window != 60000 || s.Until <= clk.Now().UnixMilli() {
			t.Fatalf("%s: Take: %+v, %v", alg, s, ok)
		}
		if a.Has("k") {
			t.Fatalf("%s: the key is still there after Take", alg)
		}
		if !b.Import("k", s) {
			t.Fatalf("%s: Import refused a live state", alg)
		}
		if b.Import("k", s) {
			t.Fatalf("%s: Import replaced a live state", alg)
		}
		if got, _ := b.Peek(ctx, "k", rule); got != want {
			t.Fatalf("%s: imported state decides %+v, want %+v", alg, got, want)
		}
		admitted, want3 := 0, 0
		for range 10 {
			if d, _ := b.AllowN(ctx, "k", rule, 1); d.Allowed {
				admitted++
			}
			if d, _ := twin.AllowN(ctx, "k", rule, 1); d.Allowed {
				want3++
			}
		}
		if admitted != want3 || admitted == 10 {
			t.Fatalf("%s: %d admitted after the import, %d where it was", alg, admitted, want3)
		}
		if e, _ := b.Export("k"); e.Algorithm != alg {
			t.Fatalf("%s: Export: %+v", alg, e)
		}
	}
}

// Drain reports each key an admitted call changed, once, and nothing
// without TrackChanges.
// A state handed over from another holder is drained once when imported
// with ImportChanged (the taker writes it behind), never with Import.
func TestImportChangedIsDrained(t *testing.T) {
	clk := testclock.New(t0)
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 100, Window: time.Minute}
	from := memstore.New(memstore.Config{Clock: clk})
	from.AllowN(ctx, "a", rule, 2)
	from.AllowN(ctx, "b", rule, 3)
	a, _ := from.Take("a")
	b, _ := from.Take("b")
	l := memstore.New(memstore.Config{Clock: clk, TrackChanges: true})
	if !l.Import("a", a) || !l.ImportChanged("b", b) {
		t.Fatal("a state was not imported")
	}
	var got []string
	l.Drain(func(k string, s memstore.State) {
		var n int64
		for _, e := range s.Log {
			n += e.Count
		}
		if n != 3 {
			t.Fatalf("drained %s with %d hits, want 3", k, n)
		}
		got = append(got, k)
	})
	if len(got) != 1 || got[0] != "b" {
		t.Fatalf("drained %v, want [b]", got)
	}
	l.Drain(func(k string, _ memstore.State) { t.Fatalf("drained %s twice", k) })
}

func TestDrainReportsChangedKeysOnce(t *testing.T) {
	clk := testclock.New(t0)
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 100, Window: time.Minute}
	plain := memstore.New(memstore.Config{Clock: clk})
	plain.AllowN(ctx, "k", rule, 1)
	plain.Drain(func(string, memstore.State) { t.Fatal("Drain found a key without TrackChanges") })

	l := memstore.New(memstore.Config{Clock: clk, TrackChanges: true})
	for range 3 {
		l.AllowN(ctx, "a", rule, 1)
		l.AllowN(ctx, "b", rule, 2)
	}
	l.Peek(ctx, "c", rule)
	got := map[string]int64{}
	l.Drain(func(k string, s memstore.State) {
		var n int64
		for _, e := range s.Log {
			n += e.Count
		}
		got[k] += n
	})
	if len(got) != 2 || got["a"] != 3 || got["b"] != 6 {
		t.Fatalf("drained %v, want a:3 b:6", got)
	}
	l.Drain(func(k string, _ memstore.State) { t.Fatalf("drained %s twice", k) })
	l.AllowN(ctx, "a", rule, 1)
	l.Reset(ctx, "b")
	n := 0
	l.Drain(func(k string, _ memstore.State) {
		if k != "a" {
			t.Fatalf("drained %s", k)
		}
		n++
	})
	if n != 1 {
		t.Fatalf("drained a %d times", n)
	}
}

// With TrackChanges, AllowN on an existing key still allocates nothing.
func TestTrackChangesAllocatesNothing(t *testing.T) {
	clk := testclock.New(t0)
	l := memstore.New(memstore.Config{Clock: clk, TrackChanges: true})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1 << 30, Window: time.Second}
	l.AllowN(ctx, "hot", rule, 1)
	for range 2 {
		l.Drain(func(string, memstore.State) {})
		l.AllowN(ctx, "hot", rule, 1)
	}
	if a := testing.AllocsPerRun(1000, func() {
		l.AllowN(ctx, "hot", rule, 1)
		l.Drain(func(string, memstore.State) {})
	}); a != 0 {
		t.Fatalf("%v allocs per AllowN+Drain", a)
	}
}

// AllowNHeldAt decides only a key that holds a state that still matters,
// and records nothing for any other; AllowNAt decides at the instant given,
// not the clock's.
func TestAllowNHeldAt(t *testing.T) {
	clk := testclock.New(t0)
	l := memstore.New(memstore.Config{Clock: clk})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Minute}
	if _, held, err := l.AllowNHeldAt(t0, "k", rule, 1); held || err != nil || l.Has("k") {
		t.Fatalf("absent key: held %v, %v; recorded %v", held, err, l.Has("k"))
	}
	if d, err := l.AllowNAt(t0, "k", rule, 2); err != nil || d.Remaining != 3 {
		t.Fatalf("AllowNAt: %+v, %v", d, err)
	}
	if d, held, err := l.AllowNHeldAt(t0, "k", rule, 1); !held || err != nil || d.Remaining != 2 {
		t.Fatalf("held key: %+v, %v, %v", d, held, err)
	}
	// At an instant past the state's window the state no longer matters:
	// the clock (still at t0) is not read.
	if _, held, _ := l.AllowNHeldAt(t0.Add(2*time.Minute), "k", rule, 1); held {
		t.Fatal("a state past its until counts as held")
	}
	if _, _, err := l.AllowNHeldAt(t0, "", rule, 1); !errors.Is(err, ringlimit.ErrInvalidKey) {
		t.Fatalf("bad key: %v", err)
	}
}
