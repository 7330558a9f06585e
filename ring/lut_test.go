package ring

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestOwnerOfHashAgreesWithBinarySearch checks the lookup table against a
// plain lower bound over the virtual nodes, at random hashes and at the
// edges: each virtual node's own hash, one either side of it, 0 and the
// largest hash.
func TestOwnerOfHashAgreesWithBinarySearch(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ members, vnodes int }{{1, 1}, {1, 256}, {2, 1}, {3, 7}, {5, 256}, {100, 256}} {
		var names []string
		for i := range tc.members {
			names = append(names, "m"+strconv.Itoa(i))
		}
		r := New(names, tc.vnodes)
		want := func(h uint64) string {
			i, _ := slices.BinarySearch(r.hashes, h)
			if i == len(r.hashes) {
				i = 0
			}
			return r.members[r.owner[i]]
		}
		hs := []uint64{0, 1, math.MaxUint64}
		for _, v := range r.hashes {
			hs = append(hs, v-1, v, v+1)
		}
		for range 10000 {
			hs = append(hs, rnd.Uint64())
		}
		for _, h := range hs {
			if got, w := r.OwnerOfHash(h), want(h); got != w {
				t.Fatalf("%d members, %d vnodes: OwnerOfHash(%#x) = %s, want %s", tc.members, tc.vnodes, h, got, w)
			}
		}
		if got, w := r.Owner("some key"), r.OwnerOfHash(Hash("some key")); got != w {
			t.Fatalf("Owner = %s, OwnerOfHash(Hash) = %s", got, w)
		}
	}
	var empty *Ring
	if empty.OwnerOfHash(7) != "" || New(nil, 0).OwnerOfHash(7) != "" {
		t.Fatal("an empty ring has an owner")
	}
}
