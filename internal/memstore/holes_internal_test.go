package memstore

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// Every other waiter of 200 gives up: 100 holes, each between two live
// waiters, more runs than a record keeps, so the deepest join its deep
// sum (84 holes' units). Then the others give up, in a random order, and
// the bucket ends as if none had come: the deep sum brings its holes back
// with the rest.
func TestHoleRecordSpillsToDeep(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second}
	t0 := time.UnixMilli(1_000_000)
	l := New(Config{Clock: pointClock{&t0}})
	twin := New(Config{Clock: pointClock{&t0}})
	l.AllowNAt(t0, "k", rule, 10)
	twin.AllowNAt(t0, "k", rule, 10)
	var rs []Reservation
	for range 200 {
		r, _ := l.ReserveN(t0, "k", rule, 1, time.Time{})
		rs = append(rs, r)
	}
	for i := 0; i < 200; i += 2 {
		l.CancelAt(t0, rs[i])
	}
	s, _ := l.locate("k")
	rec, ok := s.holes.get("k")
	if w := rule.WindowMillis(); !ok || len(rec.runs) != maxRuns || rec.deep.h != (100-maxRuns)*w {
		t.Fatalf("the record: %d runs, deep %+v (ok %v); want %d runs and %d units deep", len(rec.runs), rec.deep, ok, maxRuns, (100-maxRuns)*w)
	}
	live := []int{}
	for i := 1; i < 200; i += 2 {
		live = append(live, i)
	}
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	for _, i := range live {
		l.CancelAt(t0, rs[i])
	}
	if _, ok := s.holes.get("k"); ok {
		t.Fatal("a record is left with nobody waiting")
	}
	at := t0.Add(150 * time.Millisecond)
	got, _ := l.AllowNAt(at, "k", rule, 1)
	want, _ := twin.AllowNAt(at, "k", rule, 1)
	if got != want {
		t.Fatalf("%+v, as if the waiters never came: %+v", got, want)
	}
}
