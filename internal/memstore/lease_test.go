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
			n, life, err := l.Lease(now, "k", rule, 30, 0, time.Second)
			if err != nil || n != 30 || life != 600*time.Millisecond {
				t.Fatalf("Lease: %d, %s, %v; want 30 for the 600 ms left of the window", n, life, err)
			}
			if got := remaining(t, l, now, "k", rule); got != 70 {
				t.Fatalf("remaining after the lease: %d, want 70", got)
			}
			if n, _, _ := l.Lease(now, "k", rule, 500, 0, time.Second); n != 70 {
				t.Fatalf("a lease of more than is left took %d, want the 70 left", n)
			}
			l.Return(now.Add(100*time.Millisecond), "k", rule, 20, now)
			if got := remaining(t, l, now.Add(100*time.Millisecond), "k", rule); got != 20 {
				t.Fatalf("remaining after 20 came back: %d, want 20", got)
			}
		})
	}
	// A fixed window's hits do not come back once their window is over.
	l := memstore.New(memstore.Config{})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 100, Window: time.Second}
	took := time.UnixMilli(1_000_000_400)
	l.Lease(took, "k", rule, 100, 0, time.Second)
	next := took.Add(time.Second)
	l.AllowNAt(next, "k", rule, 10)
	l.Return(next, "k", rule, 50, took)
	if got := remaining(t, l, next, "k", rule); got != 90 {
		t.Fatalf("a return into the next window gave back: remaining %d, want 90", got)
	}
	// A sliding window's come back from the previous count in the next one.
	l = memstore.New(memstore.Config{})
	rule.Algorithm = ringlimit.SlidingWindow
	l.Lease(took, "k", rule, 100, 0, time.Second)
	l.AllowNAt(next, "k", rule, 0)
	before := remaining(t, l, next, "k", rule)
	l.AllowNAt(next, "k", rule, 1) // the state rolls to the next window
	l.Return(next, "k", rule, 50, took)
	if got := remaining(t, l, next, "k", rule); got <= before-1 {
		t.Fatalf("remaining %d after 50 came back in the next window, was %d before its hit", got, before)
	}
}

// A token bucket leases only while it cannot fill up within the lease's
// life with every leased token back: a full bucket, or one whose leases
// and refill would take it to its capacity, declines.
func TestLeaseTokenBucket(t *testing.T) {
	l := memstore.New(memstore.Config{})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 100, Window: time.Second, Burst: 1000}
	now := time.UnixMilli(1_000_000_000)
	if n, _, _ := l.Lease(now, "k", rule, 10, 0, 100*time.Millisecond); n != 0 {
		t.Fatalf("a full bucket leased %d", n)
	}
	l.AllowNAt(now, "k", rule, 20) // 980 left; 10 refill in 100 ms
	n, life, err := l.Lease(now, "k", rule, 10, 0, 100*time.Millisecond)
	if err != nil || n != 10 || life != 100*time.Millisecond {
		t.Fatalf("Lease: %d, %s, %v; want 10 for 100 ms", n, life, err)
	}
	// 970 left, 21 outstanding and 10 refilling would fill it: no lease;
	// with 20, exactly its capacity, one.
	if n, _, _ := l.Lease(now, "k", rule, 5, 21, 100*time.Millisecond); n != 0 {
		t.Fatalf("leased %d with 21 outstanding, want none", n)
	}
	if n, _, _ := l.Lease(now, "k", rule, 5, 20, 100*time.Millisecond); n != 5 {
		t.Fatalf("leased %d with 20 outstanding, want 5", n)
	}
	if got := remaining(t, l, now, "k", rule); got != 965 {
		t.Fatalf("remaining %d, want 965", got)
	}
	l.Return(now, "k", rule, 4, now)
	if got := remaining(t, l, now, "k", rule); got != 969 {
		t.Fatalf("remaining after 4 came back: %d, want 969", got)
	}
	l.Return(now, "k", rule, 500, now)
	if got := remaining(t, l, now, "k", rule); got != 1000 {
		t.Fatalf("a return past the capacity: remaining %d, want 1000", got)
	}
}

// The leaky bucket and the sliding log do not lease; bad input is refused.
func TestLeaseDeclines(t *testing.T) {
	l := memstore.New(memstore.Config{})
	now := time.UnixMilli(1_000_000_000)
	for _, alg := range []ringlimit.Algorithm{ringlimit.LeakyBucket, ringlimit.SlidingLog} {
		rule := ringlimit.Rule{Algorithm: alg, Limit: 100, Window: time.Hour}
		l.AllowNAt(now, "k-"+alg.String(), rule, 50)
		if n, _, err := l.Lease(now, "k-"+alg.String(), rule, 10, 0, time.Second); n != 0 || err != nil {
			t.Errorf("%s leased %d, %v", alg, n, err)
		}
	}
	if _, _, err := l.Lease(now, "", ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: time.Second}, 1, 0, time.Second); err == nil {
		t.Error("a lease of the empty key: no error")
	}
}
