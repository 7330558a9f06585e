package memstore_test

import (
	"container/heap"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
)

// waiterHeap orders waiters by the instant they ask again.
type waiterHeap []time.Time

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h waiterHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waiterHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *waiterHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// 2,000 waiters on one window, all denied at the same instant, each asking
// again when its ReserveN says (as WaitN does), at exact instants: every
// one is admitted, and the key's holder serves O(1) calls per admission.
// Before the queue, they all asked again at the window's edge: 2,000 asks
// there for 110 admissions, then 1,890 at the next edge, and so on (the
// issue measured 19,973 calls for 110 admissions).
func TestWindowWaitersAskInTurn(t *testing.T) {
	for _, alg := range []ringlimit.Algorithm{ringlimit.FixedWindow, ringlimit.SlidingWindow, ringlimit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			rule := ringlimit.Rule{Algorithm: alg, Limit: 110, Window: time.Second}
			l := memstore.New(memstore.Config{})
			t0 := time.UnixMilli(1_000_000_000)
			if d, _ := l.AllowNAt(t0, "k", rule, 110); !d.Allowed {
				t.Fatal("the first window's hits were denied")
			}
			const waiters = 2000
			h := &waiterHeap{}
			calls := 0
			for range waiters {
				calls++
				r, err := l.ReserveN(t0, "k", rule, 1, time.Time{})
				if err != nil || r.Decision.Allowed {
					t.Fatalf("a waiter in a full window: %+v, %v", r.Decision, err)
				}
				heap.Push(h, r.At)
			}
			admitted := 0
			var last time.Time
			for h.Len() > 0 {
				at := heap.Pop(h).(time.Time)
				if at.Before(last) {
					t.Fatal("asked in the past")
				}
				last = at
				calls++
				r, err := l.ReserveN(at, "k", rule, 1, time.Time{})
				if err != nil {
					t.Fatal(err)
				}
				if r.Decision.Allowed {
					admitted++
					continue
				}
				if !r.At.After(at) {
					t.Fatalf("told to ask again at %v, at %v", r.At, at)
				}
				heap.Push(h, r.At)
			}
			perAdmission := float64(calls) / float64(admitted)
			t.Logf("%s: %d calls for %d admissions (%.2f each), the last at +%s", alg, calls, admitted, perAdmission, last.Sub(t0))
			if admitted != waiters {
				t.Fatalf("admitted %d of %d waiters", admitted, waiters)
			}
			if perAdmission > 2.5 {
				t.Fatalf("%d calls for %d admissions: want O(1) each (at most 2.5)", calls, admitted)
			}
			// They were admitted at the rule's pace: 110 a window.
			if span, min := last.Sub(t0), time.Duration(waiters/110)*time.Second; span < min || span > min+2*time.Second {
				t.Fatalf("the last was admitted %s on, want about %s", span, min)
			}
		})
	}
}

// Waiters that give up leave the key's queue: 100 waiters on a full
// fixed window of 10 a second cancel, and the next waiter asks again at
// the window's edge, not behind their 100 places (10 s on). Through
// CancelAt and through a ticket (a node's cancel of a forwarded wait).
func TestWindowWaitersThatGiveUpLeaveTheQueue(t *testing.T) {
	for _, how := range []string{"CancelAt", "CancelTicket"} {
		t.Run(how, func(t *testing.T) {
			rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Second}
			l := memstore.New(memstore.Config{})
			t0 := time.UnixMilli(1_000_000_000)
			l.AllowNAt(t0, "k", rule, 10)
			var rs []memstore.Reservation
			for range 100 {
				r, _ := l.ReserveN(t0, "k", rule, 1, time.Time{})
				rs = append(rs, r)
			}
			if last := rs[99].At.Sub(t0); last < 10*time.Second {
				t.Fatalf("the 100th waiter asks again %s on, want its place 10 s on", last)
			}
			for _, r := range rs {
				if how == "CancelAt" {
					l.CancelAt(t0, r)
				} else {
					l.CancelTicket(t0, "k", rule, r.Ticket())
				}
			}
			r, _ := l.ReserveN(t0, "k", rule, 1, time.Time{})
			if got := r.At.Sub(t0); got != time.Second {
				t.Fatalf("after 100 waiters gave up, the next asks again %s on, want at the window's edge, 1 s", got)
			}
			if got := l.Stats().StaleCancels; got != 0 {
				t.Fatalf("StaleCancels = %d, want 0: a window waiter's leave is not stale", got)
			}
		})
	}
}
