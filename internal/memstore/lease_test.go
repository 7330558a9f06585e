package memstore_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
)

func remaining(t *testing.T, l *memstore.Limiter, now time.Time, key string, rule ringlimit.Rule) int64 {
	t.Helper()
	d, err := l.AllowNAt(now, key, rule, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// A window leases a share of its current window: counted now, for no longer
// than the window lasts; unused hits come back while it does.
func TestLeaseWindows(t *testing.T) {
	for _, alg := range []ringlimit.Algorithm{ringlimit.FixedWindow, ringlimit.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			l := memstore.New(memstore.Config{})
			rule := ringlimit.Rule{Algorithm: alg, Limit: 100, Window: time.Second}
			now := time.UnixMilli(1_000_000_400) // 400 ms into a window
			g, err := l.Lease(now, "k", rule, 30, time.Second)
			if err != nil || g.N != 30 || g.Life != 600*time.Millisecond || g.Floor != 0 {
				t.Fatalf("Lease: %+v, %v; want 30 for the 600 ms left of the window", g, err)
			}
			if got := remaining(t, l, now, "k", rule); got != 70 {
				t.Fatalf("remaining after the lease: %d, want 70", got)
			}
			if g, _ := l.Lease(now, "k", rule, 500, time.Second); g.N != 70 {
				t.Fatalf("a lease of more than is left took %d, want the 70 left", g.N)
			}
			l.Return(now.Add(100*time.Millisecond), "k", rule, g, 20)
			if got := remaining(t, l, now.Add(100*time.Millisecond), "k", rule); got != 20 {
				t.Fatalf("remaining after 20 came back: %d, want 20", got)
			}
		})
	}
	// A fixed window's hits do not come back once their window is over.
	l := memstore.New(memstore.Config{})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 100, Window: time.Second}
	took := time.UnixMilli(1_000_000_400)
	g, _ := l.Lease(took, "k", rule, 100, time.Second)
	next := took.Add(time.Second)
	l.AllowNAt(next, "k", rule, 10)
	l.Return(next, "k", rule, g, 50)
	if got := remaining(t, l, next, "k", rule); got != 90 {
		t.Fatalf("a return into the next window gave back: remaining %d, want 90", got)
	}
	// A sliding window's come back from the previous count in the next one.
	l = memstore.New(memstore.Config{})
	rule.Algorithm = ringlimit.SlidingWindow
	g, _ = l.Lease(took, "k", rule, 100, time.Second)
	l.AllowNAt(next, "k", rule, 0)
	before := remaining(t, l, next, "k", rule)
	l.AllowNAt(next, "k", rule, 1) // the state rolls to the next window
	l.Return(next, "k", rule, g, 50)
	if got := remaining(t, l, next, "k", rule); got <= before-1 {
		t.Fatalf("remaining %d after 50 came back in the next window, was %d before its hit", got, before)
	}
}

// The leaky bucket and the sliding log do not lease; bad input is refused.
func TestLeaseDeclines(t *testing.T) {
	l := memstore.New(memstore.Config{})
	now := time.UnixMilli(1_000_000_000)
	for _, alg := range []ringlimit.Algorithm{ringlimit.LeakyBucket, ringlimit.SlidingLog} {
		rule := ringlimit.Rule{Algorithm: alg, Limit: 100, Window: time.Hour}
		l.AllowNAt(now, "k-"+alg.String(), rule, 50)
		if g, err := l.Lease(now, "k-"+alg.String(), rule, 10, time.Second); g.N != 0 || err != nil {
			t.Errorf("%s leased %d, %v", alg, g.N, err)
		}
	}
	if _, err := l.Lease(now, "", ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: time.Second}, 1, time.Second); err == nil {
		t.Error("a lease of the empty key: no error")
	}
}
