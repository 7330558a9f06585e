package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
)

// A waiter's reservation is out when the key is reset; callers then use
// the fresh state's capacity, and the waiter gives up. Its cancel names
// the state it came from (its epoch), which is gone: it gives nothing
// back, and is counted. Before the epoch, the cancel put its 10 hits into
// the new state, and the key admitted 20 of its 10 after the Reset.
func TestCancelAfterResetGivesNothingBack(t *testing.T) {
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		for _, how := range []string{"CancelAt", "CancelTicket"} {
			t.Run(alg.String()+"/"+how, func(t *testing.T) {
				rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Hour}
				t0 := time.UnixMilli(1_000_000)
				l := memstore.New(memstore.Config{})
				if d, _ := l.AllowNAt(t0, "k", rule, 10); !d.Allowed {
					t.Fatal("the burst was denied")
				}
				r, err := l.ReserveN(t0, "k", rule, 10, time.Time{})
				if err != nil || !r.Decision.Allowed || !r.At.After(t0) {
					t.Fatalf("reservation: %+v at %v, %v", r.Decision, r.At, err)
				}
				if err := l.Reset(context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
				admitted := 0
				for range 10 {
					if d, _ := l.AllowNAt(t0, "k", rule, 1); d.Allowed {
						admitted++
					}
				}
				if how == "CancelAt" {
					l.CancelAt(t0, r)
				} else {
					l.CancelTicket(t0, "k", rule, r.Ticket())
				}
				for range 20 {
					if d, _ := l.AllowNAt(t0, "k", rule, 1); d.Allowed {
						admitted++
					}
				}
				if admitted != 10 {
					t.Fatalf("after the Reset the key admitted %d, want its capacity, 10", admitted)
				}
				if got := l.Stats().StaleCancels; got != 1 {
					t.Fatalf("StaleCancels = %d, want 1", got)
				}
			})
		}
	}
}

// The same after the key's state was started afresh by a change of
// algorithm and back: the state a reservation came from is gone even
// though one under its rule is there again.
func TestCancelAfterRuleChangeGivesNothingBack(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Hour}
	other := rule
	other.Algorithm = ringlimit.FixedWindow
	t0 := time.UnixMilli(1_000_000)
	l := memstore.New(memstore.Config{})
	l.AllowNAt(t0, "k", rule, 10)
	r, _ := l.ReserveN(t0, "k", rule, 10, time.Time{})
	l.AllowNAt(t0, "k", other, 1) // the key's state starts afresh under the window
	if d, _ := l.AllowNAt(t0, "k", rule, 10); !d.Allowed {
		t.Fatal("the bucket did not start afresh")
	}
	l.CancelAt(t0.Add(time.Millisecond), r)
	if d, _ := l.AllowNAt(t0.Add(time.Millisecond), "k", rule, 1); d.Allowed {
		t.Fatal("a cancel from the earlier state gave hits to the new one")
	}
	if got := l.Stats().StaleCancels; got != 1 {
		t.Fatalf("StaleCancels = %d, want 1", got)
	}
}

// A cancel in the state it came from still gives back, after other
// decisions (which keep the state's epoch) and a second reservation.
func TestCancelSameStateStillGivesBack(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 1}
	t0 := time.UnixMilli(1_000_000)
	l := memstore.New(memstore.Config{})
	l.AllowNAt(t0, "k", rule, 1)
	r1, _ := l.ReserveN(t0, "k", rule, 1, time.Time{})
	l.AllowNAt(t0, "k", rule, 1) // denied: decides on the state, keeps its epoch
	l.CancelAt(t0.Add(50*time.Millisecond), r1)
	if d, _ := l.AllowNAt(t0.Add(100*time.Millisecond), "k", rule, 1); !d.Allowed {
		t.Fatal("the reservation's token did not come back")
	}
	if got := l.Stats().StaleCancels; got != 0 {
		t.Fatalf("StaleCancels = %d, want 0", got)
	}
}
