package memstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
)

// A short key lives in its slot's key area, which the slot's next key
// overwrites: the keys that Range, RangeArcs and Drain hand out must keep
// their bytes after their slots are reused.
func TestKeysOutliveTheirSlots(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	l := New(Config{Clock: clk, TrackChanges: true})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute}
	ctx := context.Background()
	const n = 300
	for i := range n {
		l.AllowN(ctx, fmt.Sprintf("old%05d", i), rule, 1)
	}
	var ranged, arced, drained []string
	l.Range(func(k string, _ State) bool { ranged = append(ranged, k); return true })
	l.RangeArcs([]Arc{{0, 0}}, func(k string, _ State) bool { arced = append(arced, k); return true })
	l.Drain(func(k string, _ State) { drained = append(drained, k) })
	want := func(keys []string) map[string]bool {
		m := map[string]bool{}
		for _, k := range keys {
			m[k] = true
		}
		return m
	}
	before := [][]string{append([]string(nil), ranged...), append([]string(nil), arced...), append([]string(nil), drained...)}
	for i := range n { // free every slot, then fill each with another key of the same length
		l.Reset(ctx, fmt.Sprintf("old%05d", i))
	}
	for i := range n {
		l.AllowN(ctx, fmt.Sprintf("new%05d", i), rule, 1)
	}
	for j, got := range [][]string{ranged, arced, drained} {
		if len(got) != n {
			t.Fatalf("hand-out %d saw %d keys, want %d", j, len(got), n)
		}
		w := want(before[j])
		for _, k := range got {
			if !w[k] || k[:3] != "old" {
				t.Fatalf("hand-out %d: a key handed out became %q", j, k)
			}
		}
	}
}

// The key strings of short keys point into their page's key area, also
// after the first page grows; a key Drain handed out keeps its own copy,
// and Stats.Bytes counts it, until the key goes.
func TestKeyArea(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	l := New(Config{Clock: clk, MaxKeys: 1000, TrackChanges: true})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute}
	ctx := context.Background()
	s := &l.shards[0]
	if len(l.shards) != 1 {
		t.Fatalf("%d shards, want 1", len(l.shards))
	}
	recount := s.recount
	for i := range 600 { // the first page grows from 8 slots to 512, then more pages
		l.AllowN(ctx, fmt.Sprint("k", i), rule, 1)
		if i == 100 {
			l.Drain(func(string, State) {})
		}
	}
	held := 0
	s.indexRange(func(i int32) {
		if !s.inKeyArea(i) {
			held++
		}
	})
	if held != 101 {
		t.Fatalf("%d keys hold their own copy, want the 101 drained", held)
	}
	if got, want := s.bytes, recount(); got != want {
		t.Fatalf("%d bytes counted, %d held", got, want)
	}
	bytes := s.bytes
	for i := range 101 {
		l.Reset(ctx, fmt.Sprint("k", i))
	}
	copies := int64(0)
	for i := range 101 {
		copies += stringBytes(len(fmt.Sprint("k", i)))
	}
	if got, want := s.bytes, bytes-copies; got != want || got != recount() {
		t.Fatalf("after the drained keys went: %d bytes counted, want %d (%d held)", got, want, recount())
	}
}

// A rule that admits while another denies reports what it has left now, as
// a Peek does, under every algorithm and in either order of the rules.
func TestAllowAllDenialReportsAPeek(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	ctx := context.Background()
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket, ringlimit.FixedWindow, ringlimit.SlidingWindow, ringlimit.SlidingLog} {
		loose := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Minute}
		tight := ringlimit.Rule{Algorithm: alg, Limit: 1, Window: time.Minute}
		for name, rules := range map[string][]ringlimit.Rule{"loose first": {loose, tight}, "tight first": {tight, loose}} {
			l := New(Config{Clock: clk})
			j := 0 // the loose rule's index
			if rules[0] == tight {
				j = 1
			}
			if ds, err := l.AllowAll(ctx, "k", rules, 1); err != nil || !ds[0].Allowed || !ds[1].Allowed {
				t.Fatalf("%s %s: first call: %+v %v", alg, name, ds, err)
			}
			ds, err := l.AllowAll(ctx, "k", rules, 1)
			if err != nil || ds[1-j].Allowed || !ds[j].Allowed {
				t.Fatalf("%s %s: second call: %+v %v", alg, name, ds, err)
			}
			peek, _ := l.AllowAll(ctx, "k", rules, 0)
			if ds[j] != peek[j] || ds[j].Remaining != 9 {
				t.Errorf("%s %s: the admitting rule reported %+v on a denial; a peek reports %+v", alg, name, ds[j], peek[j])
			}
		}
	}
}
