package memstore_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
)

// cancelOrders are the orders in which a test's waiters give up: as they
// came (the first to time out is the first that came), the reverse, and
// shuffled.
var cancelOrders = []string{"fifo", "lifo", "random"}

// ordered returns 0..n-1 in the named order.
func ordered(order string, n int, rng *rand.Rand) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	switch order {
	case "lifo":
		slices.Reverse(idx)
	case "random":
		rng.Shuffle(n, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	}
	return idx
}

// N waiters reserve on a bucket that the burst emptied, and all of them
// give up, in each order: the next call is then decided exactly as on a
// twin that saw only the burst (issue 40: 1,000 waiters who gave up in the
// order they came left the bucket refusing for 86–99 s; x/time/rate's rule
// gives back a cancel's hits only if nobody reserved after it).
func TestCancelledWaitersLeaveNoTrace(t *testing.T) {
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		for _, order := range cancelOrders {
			t.Run(alg.String()+"/"+order, func(t *testing.T) {
				rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Second}
				rng := rand.New(rand.NewPCG(1, 2))
				l, twin := memstore.New(memstore.Config{}), memstore.New(memstore.Config{})
				at := func(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
				for _, x := range []*memstore.Limiter{l, twin} {
					if d, _ := x.AllowNAt(at(0), "k", rule, rule.Capacity()); !d.Allowed {
						t.Fatalf("the burst: %+v", d)
					}
				}
				const waiters = 1000
				rs := make([]memstore.Reservation, waiters)
				for i := range rs {
					r, err := l.ReserveN(at(int64(i%7)), "k", rule, 1+int64(i%2), time.Time{})
					if err != nil || !r.Decision.Allowed || !r.At.After(at(99)) {
						t.Fatalf("waiter %d: %+v at %v, %v", i, r.Decision, r.At.Sub(t0), err)
					}
					rs[i] = r
				}
				for k, i := range ordered(order, waiters, rng) {
					l.CancelAt(at(10+int64(k)/20), rs[i]) // all give up by 60 ms, before the first one's turn
				}
				for _, ms := range []int64{110, 150, 1000} {
					got, _ := l.AllowNAt(at(ms), "k", rule, 1)
					want, _ := twin.AllowNAt(at(ms), "k", rule, 1)
					if got != want {
						t.Fatalf("at %d ms, after %d waiters gave up (%s): %+v, as if they never came: %+v", ms, waiters, order, got, want)
					}
				}
				if s := l.Stats().StaleCancels; s != 0 {
					t.Fatalf("%d cancels counted stale", s)
				}
			})
		}
	}
}

// A hole is not taken back while a waiter above it still waits: the
// waiters above keep the instants they were promised, and a caller
// placed among them would act beside one (token bucket, burst 1, 10/s:
// waiters due at 100, 200 and 300 ms; the first and the last give up; a
// newcomer is placed at 300 ms, not at 100 or 200). Once the one in the
// middle gives up too, both holes come back.
func TestHoleStaysBelowALiveWaiter(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 1}
	at := func(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	l := memstore.New(memstore.Config{})
	l.AllowNAt(at(0), "k", rule, 1)
	var rs []memstore.Reservation
	for i := range 3 {
		r, _ := l.ReserveN(at(0), "k", rule, 1, time.Time{})
		if !r.At.Equal(at(100 * int64(i+1))) {
			t.Fatalf("waiter %d at %v", i, r.At.Sub(t0))
		}
		rs = append(rs, r)
	}
	l.CancelAt(at(10), rs[0]) // a hole below two live waiters
	l.CancelAt(at(20), rs[2]) // on top: its own token comes back at once
	r, _ := l.ReserveN(at(30), "k", rule, 1, time.Time{})
	if !r.At.Equal(at(300)) {
		t.Fatalf("a newcomer behind the waiter due at 200 ms acts at %v, want 300 ms", r.At.Sub(t0))
	}
	l.CancelAt(at(40), r)
	l.CancelAt(at(50), rs[1]) // nobody waits any more
	if d, _ := l.AllowNAt(at(100), "k", rule, 1); !d.Allowed {
		t.Fatalf("after every waiter gave up, at 100 ms: %+v, want the token that refilled since 0", d)
	}
}

// The queue's tail moves down to the last waiter who still waits: runs of
// holes that reach the top come back, though deeper holes wait for the
// waiters between them (token bucket, burst 1, 10/s: waiters due at 100 to
// 600 ms; those due at 200, 400, 600 and 500 ms give up, in that order; a
// newcomer is then placed at 400 ms, right after the one due at 300 ms).
func TestTailMovesDownToTheLastLiveWaiter(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 1}
	at := func(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	l := memstore.New(memstore.Config{})
	l.AllowNAt(at(0), "k", rule, 1)
	var rs []memstore.Reservation
	for range 6 {
		r, _ := l.ReserveN(at(0), "k", rule, 1, time.Time{})
		rs = append(rs, r)
	}
	for _, i := range []int{1, 3, 5, 4} {
		l.CancelAt(at(10), rs[i])
	}
	if r, _ := l.ReserveN(at(20), "k", rule, 1, time.Time{}); !r.At.Equal(at(400)) {
		t.Fatalf("a newcomer behind the waiter due at 300 ms acts at %v, want 400 ms", r.At.Sub(t0))
	}
}

// Cancels read the clock before they take the key's lock, so they may come
// out of their clocks' order: a hole recorded at 20 ms is still one for a
// cancel that read 18 ms.
func TestCancelsOutOfClockOrder(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second}
	at := func(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	l, twin := memstore.New(memstore.Config{}), memstore.New(memstore.Config{})
	l.AllowNAt(at(0), "k", rule, 10)
	twin.AllowNAt(at(0), "k", rule, 10)
	var rs []memstore.Reservation
	for range 3 {
		r, _ := l.ReserveN(at(0), "k", rule, 1, time.Time{})
		rs = append(rs, r)
	}
	l.CancelAt(at(20), rs[1])
	l.CancelAt(at(19), rs[0])
	l.CancelAt(at(18), rs[2])
	got, _ := l.AllowNAt(at(100), "k", rule, 1)
	want, _ := twin.AllowNAt(at(100), "k", rule, 1)
	if got != want {
		t.Fatalf("%+v, as if the waiters never came: %+v", got, want)
	}
}

// Reservations, calls and cancels at random instants on a bucket never
// let more hits act than the rule allows: each hit acts at its instant (a
// call's at once, plus its Delay; a reservation's at its At, unless it
// gave up before), and a bucket fed them in that order never overflows (a
// token bucket's capacity; a leaky bucket's queue is empty whenever a call
// starts to leave). Instants are whole ms, each rounded up from the exact
// one the level gives, and a bucket's level between two acts depends only
// on the first act since it was last empty: so the bucket fed the rounded
// instants may hold up to limit−1 units (under 1 ms of draining) more than
// the exact one, and that is the slack allowed.
func TestCancelsNeverOverAdmit(t *testing.T) {
	steps := 0
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		for seed := range uint64(300) {
			rng := rand.New(rand.NewPCG(seed, uint64(alg)))
			rule := ringlimit.Rule{Algorithm: alg, Limit: 1 + rng.Int64N(20),
				Window: time.Duration(1+rng.Int64N(2000)) * time.Millisecond, Burst: rng.Int64N(6)}
			l := memstore.New(memstore.Config{})
			now := t0.UnixMilli()
			type act struct{ at, n, seq int64 } // seq: the order they were placed in
			var acts []act
			var pend []memstore.Reservation
			var seqs []int64
			seq := int64(0)
			gap := max(1, rule.WindowMillis()/rule.Limit)
			// Odd seeds build long queues (more reservations, less time
			// between steps), so that cancels leave many runs of holes.
			long := seed%2 == 1
			for range 200 {
				steps++
				if long {
					now += rng.Int64N(gap/4 + 1)
				} else {
					now += rng.Int64N(2 * gap)
				}
				switch op := rng.IntN(5); {
				case op <= 1 || long && op == 2 && rng.IntN(2) == 0:
					n := 1 + rng.Int64N(rule.Capacity())
					r, err := l.ReserveN(time.UnixMilli(now), "k", rule, n, time.Time{})
					if err != nil || !r.Decision.Allowed {
						t.Fatalf("seed %d: reserve: %+v, %v", seed, r.Decision, err)
					}
					seq++
					if r.At.UnixMilli() > now {
						pend, seqs = append(pend, r), append(seqs, seq)
					} else {
						acts = append(acts, act{now + r.Decision.Delay.Milliseconds(), n, seq})
					}
				case op == 2:
					n := 1 + rng.Int64N(rule.Capacity())
					seq++
					if d, _ := l.AllowNAt(time.UnixMilli(now), "k", rule, n); d.Allowed {
						acts = append(acts, act{now + d.Delay.Milliseconds(), n, seq})
					}
				case len(pend) > 0:
					i := rng.IntN(len(pend))
					if pend[i].At.UnixMilli() > now {
						l.CancelAt(time.UnixMilli(now), pend[i])
					} else {
						acts = append(acts, act{pend[i].At.UnixMilli(), pend[i].Ticket().N, seqs[i]})
					}
					pend, seqs = slices.Delete(pend, i, i+1), slices.Delete(seqs, i, i+1)
				}
			}
			for i, r := range pend {
				acts = append(acts, act{r.At.UnixMilli(), r.Ticket().N, seqs[i]})
			}
			// In the order they act; in one ms, in the order they were
			// placed (a leaky bucket's calls leave one after another).
			slices.SortFunc(acts, func(a, b act) int {
				if a.at != b.at {
					return int(a.at - b.at)
				}
				return int(a.seq - b.seq)
			})
			w, full := rule.WindowMillis(), rule.Capacity()*rule.WindowMillis()
			level, last := int64(0), int64(0)
			for i, a := range acts {
				level = max(0, level-(a.at-last)*rule.Limit)
				last = a.at
				slack := rule.Limit - 1
				if alg == ringlimit.LeakyBucket && level > slack || level+a.n*w > full+slack {
					t.Fatalf("seed %d (%+v): %d hits act at %d ms with the bucket at %d of %d units: over the rule (act %d of %d)",
						seed, rule, a.n, a.at-t0.UnixMilli(), level, full, i, len(acts))
				}
				level += a.n * w
			}
		}
	}
	t.Logf("%d steps", steps)
}

func ExampleLimiter_CancelAt() {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second}
	l := memstore.New(memstore.Config{})
	l.AllowNAt(t0, "k", rule, 10) // the burst
	var rs []memstore.Reservation
	for range 100 {
		r, _ := l.ReserveN(t0, "k", rule, 1, time.Time{})
		rs = append(rs, r)
	}
	for _, r := range rs { // they give up in the order they came
		l.CancelAt(t0.Add(time.Millisecond), r)
	}
	d, _ := l.AllowNAt(t0.Add(100*time.Millisecond), "k", rule, 1)
	fmt.Println(d.Allowed)
	// Output: true
}
