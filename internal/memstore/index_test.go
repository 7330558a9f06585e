package memstore

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// The index against a map, over random inserts and deletes that grow,
// shrink and wrap its buckets: with a good hash, and with one so poor that
// keys share fragments and home buckets in long runs.
func TestIndexAgainstMap(t *testing.T) {
	seed := maphash.MakeSeed()
	poor := func(k string) uint64 { return maphash.String(seed, k) & (0xff<<56 | 0xff) }
	for name, hash := range map[string]func(string) uint64{"default": nil, "poor": poor} {
		l := New(Config{Hash: hash})
		var s shard
		s.init(1<<16, 1<<40, l)
		model := map[string]int32{}
		r := rand.New(rand.NewPCG(1, 2))
		steps := 100_000
		if hash != nil {
			steps = 5_000
		}
		for step := range steps {
			key := fmt.Sprint("k", r.IntN(3000))
			_, frag := l.locate(key)
			if i, ok := model[key]; ok && r.IntN(2) == 0 {
				s.remove(i)
				delete(model, key)
			} else if !ok {
				i := s.insert(key, frag, 0, 0)
				s.at(i).until = 1 << 62 // live: the insert's sweep must not drop it
				model[key] = i
			}
			if step%2500 == 0 || step > steps-500 {
				if s.nkeys != len(model) {
					t.Fatalf("%s step %d: %d keys indexed, %d in the model", name, step, s.nkeys, len(model))
				}
				for k, i := range model {
					_, f := l.locate(k)
					if j, ok := s.lookup(k, f, 0); !ok || j != i {
						t.Fatalf("%s step %d: lookup %s = %d, %v; want %d", name, step, k, j, ok, i)
					}
				}
				if _, f := l.locate("absent"); true {
					if _, ok := s.lookup("absent", f, 0); ok {
						t.Fatalf("%s step %d: found an absent key", name, step)
					}
				}
				n := 0
				s.indexRange(func(int32) { n++ })
				if n != len(model) {
					t.Fatalf("%s step %d: range saw %d keys, want %d", name, step, n, len(model))
				}
			}
		}
		if len(s.buckets) > 8192 {
			t.Fatalf("%s: %d buckets for at most 3000 keys", name, len(s.buckets))
		}
	}
}
