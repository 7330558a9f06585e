package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
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
// after the first page grows; a key Drain handed out keeps a copy in the
// key arena, and Stats.Bytes counts it, until the key goes.
func TestKeyArea(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	l := New(Config{Clock: clk, MaxKeys: 1000, TrackChanges: true})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute}
	ctx := context.Background()
	s := &l.shards[0]
	if len(l.shards) != 1 {
		t.Fatalf("%d shards, want 1", len(l.shards))
	}
	for i := range 600 { // the first page grows from 8 slots to 512, then more pages
		l.AllowN(ctx, fmt.Sprint("k", i), rule, 1)
		if i == 100 {
			before := s.bytes
			l.Drain(func(string, State) {})
			if s.bytes <= before {
				t.Fatalf("after Drain: %d bytes counted, %d before: the copies are not counted", s.bytes, before)
			}
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
	if got, want := s.bytes, s.recount(); got != want {
		t.Fatalf("%d bytes counted, %d held", got, want)
	}
	for i := range 101 {
		l.Reset(ctx, fmt.Sprint("k", i))
	}
	if s.keys.bytes != allocBytes(int64(cap(s.keys.chunks))*chunkStruct, true) || s.bytes != s.recount() { // every chunk given back
		t.Fatalf("after the drained keys went: %d bytes in the key arena, %d counted, %d held", s.keys.bytes, s.bytes, s.recount())
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

// The key arena keeps every key's bytes through compactions, and a key's
// string handed out (Range, Drain) keeps its bytes after its chunk is
// compacted or given back: after a random mix of new keys of 17 to 600
// bytes, Resets and evictions, each key held is found under its own bytes,
// each string handed out still reads as when it was handed out, and the
// bytes counted are those held.
func TestKeyArenaCompacts(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	l := New(Config{Clock: clk, MaxBytes: 256 << 10, TrackChanges: true})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Hour}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(11, 12))
	keyOf := func(id int) string { // its own bytes tell what it should read
		n := 17 + id*7919%584
		return fmt.Sprintf("%06d:", id) + strings.Repeat(string(rune('a'+id%26)), n-7)
	}
	type out struct{ got, want string }
	var handed []out
	for step := range 30_000 {
		id := r.IntN(3000)
		if r.IntN(4) == 0 {
			l.Reset(ctx, keyOf(id))
		} else {
			l.AllowN(ctx, keyOf(id), rule, 1)
		}
		if step%1000 == 999 {
			l.Drain(func(k string, _ State) {
				if len(handed) < 5000 {
					handed = append(handed, out{k, strings.Clone(k)})
				}
			})
			l.Range(func(k string, _ State) bool {
				var id int
				if _, err := fmt.Sscanf(k, "%06d:", &id); err != nil || k != keyOf(id) {
					t.Fatalf("step %d: Range handed out %q", step, k)
				}
				if !l.Has(k) {
					t.Fatalf("step %d: key %q is not found under its bytes", step, k[:7])
				}
				return true
			})
			for i := range l.shards {
				if s := &l.shards[i]; s.bytes != s.recount() {
					t.Fatalf("step %d shard %d: %d bytes counted, %d held", step, i, s.bytes, s.recount())
				}
			}
		}
	}
	for _, h := range handed {
		if h.got != h.want {
			t.Fatalf("a key handed out changed from %q to %q", h.want[:7], h.got[:7])
		}
	}
	moves := uint64(0)
	for i := range l.shards {
		moves += l.shards[i].keys.moves
	}
	if st := l.Stats(); st.Evicted == 0 || moves == 0 || len(handed) == 0 {
		t.Fatalf("the workload did not exercise the arena: %d evicted, %d chunks compacted, %d keys handed out", st.Evicted, moves, len(handed))
	}
}

// Sliding logs' rings and headers live in the key arena and the shard's
// slab beside the keys: after a random mix of hits on keys of 17 to 600
// bytes under a sliding log (each hit at its own millisecond, so rings
// grow and move to larger records) and Resets (which leave dead records,
// so chunks are compacted), every key's log holds exactly the stamps it
// was given, and the bytes counted are those held.
func TestSlidingLogsInTheArena(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	l := New(Config{Clock: clk, MaxBytes: 64 << 20})
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 1000, Window: 24 * time.Hour}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(13, 14))
	keyOf := func(id int) string { return fmt.Sprintf("%06d:", id) + strings.Repeat("k", 10+id*7919%590) }
	model := map[int][]int64{}
	for step := range 40_000 {
		id := r.IntN(400)
		if r.IntN(10) == 0 {
			l.Reset(ctx, keyOf(id))
			delete(model, id)
			continue
		}
		clk.Advance(time.Millisecond)
		if d, err := l.AllowN(ctx, keyOf(id), rule, 1); err != nil || !d.Allowed {
			t.Fatalf("step %d: %+v %v", step, d, err)
		}
		model[id] = append(model[id], clk.Now().UnixMilli())
	}
	for id, stamps := range model {
		st, ok := l.Export(keyOf(id))
		if !ok || len(st.Log) != len(stamps) {
			t.Fatalf("key %d: exported %v (held %t), want %d stamps", id, len(st.Log), ok, len(stamps))
		}
		for j, e := range st.Log {
			if e.Stamp != stamps[j] || e.Count != 1 {
				t.Fatalf("key %d: stamp %d is %+v, want %d", id, j, e, stamps[j])
			}
		}
	}
	moves := uint64(0)
	for i := range l.shards {
		s := &l.shards[i]
		if s.bytes != s.recount() {
			t.Fatalf("shard %d: %d bytes counted, %d held", i, s.bytes, s.recount())
		}
		moves += s.keys.moves
	}
	if st := l.Stats(); moves == 0 || st.Evicted != 0 {
		t.Fatalf("%d chunks compacted, %d keys evicted: the workload did not exercise compaction alone", moves, st.Evicted)
	}
}
