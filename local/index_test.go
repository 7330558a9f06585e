package local

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// The index against a map, over random inserts and deletes that grow,
// shrink and wrap its buckets.
func TestIndexAgainstMap(t *testing.T) {
	var s shard
	s.init(1<<16, maphash.MakeSeed())
	model := map[string]int32{}
	r := rand.New(rand.NewPCG(1, 2))
	for step := range 200_000 {
		key := fmt.Sprint("k", r.IntN(3000))
		if i, ok := model[key]; ok && r.IntN(2) == 0 {
			s.remove(i)
			delete(model, key)
		} else if !ok {
			i := s.insert(key, 0)
			s.at(i).until = 1 << 62 // live: the insert's sweep must not drop it
			model[key] = i
		}
		if step%1000 == 0 || step > 199_000 {
			if s.nkeys != len(model) {
				t.Fatalf("step %d: %d keys indexed, %d in the model", step, s.nkeys, len(model))
			}
			for k, i := range model {
				if j, ok := s.lookup(k); !ok || j != i {
					t.Fatalf("step %d: lookup %s = %d, %v; want %d", step, k, j, ok, i)
				}
			}
			if _, ok := s.lookup("absent"); ok {
				t.Fatalf("step %d: found an absent key", step)
			}
			n := 0
			s.indexRange(func(int32) { n++ })
			if n != len(model) {
				t.Fatalf("step %d: range saw %d keys, want %d", step, n, len(model))
			}
		}
	}
	if len(s.buckets) > 8192 {
		t.Fatalf("%d buckets for at most 3000 keys", len(s.buckets))
	}
}
