package ring

import (
	"testing"

	"github.com/cespare/xxhash/v2"
)

// inArc reports whether h falls in a: after From, at or before To, wrapping.
func inArc(a Arc, h uint64) bool {
	if a.From < a.To {
		return a.From < h && h <= a.To
	}
	return h > a.From || h <= a.To
}

func TestArcsAgreeWithOwner(t *testing.T) {
	for _, members := range [][]string{names(2), names(3), names(5)} {
		r := New(members, 16)
		arcs := r.Arcs()
		if len(arcs) < len(members) || len(arcs) > len(members)*16 {
			t.Fatalf("%d members: %d arcs", len(members), len(arcs))
		}
		if arcs[0].From < arcs[0].To {
			t.Errorf("first arc %+v does not cross zero", arcs[0])
		}
		for i, a := range arcs {
			next := arcs[(i+1)%len(arcs)]
			if a.To != next.From {
				t.Errorf("arc %d ends at %d, arc %d starts at %d", i, a.To, i+1, next.From)
			}
			if a.Owner == next.Owner {
				t.Errorf("arcs %d and %d both belong to %s: not merged", i, i+1, a.Owner)
			}
			if i > 0 && a.From >= a.To {
				t.Errorf("arc %d %+v crosses zero too", i, a)
			}
		}
		for _, k := range keys(2000) {
			h := xxhash.Sum64String(k)
			var hits []string
			for _, a := range arcs {
				if inArc(a, h) {
					hits = append(hits, a.Owner)
				}
			}
			if len(hits) != 1 || hits[0] != r.Owner(k) {
				t.Fatalf("%d members: key %s (hash %d) in arcs of %v, owner %s", len(members), k, h, hits, r.Owner(k))
			}
		}
	}
}

func TestArcsEdges(t *testing.T) {
	if a := (*Ring)(nil).Arcs(); a != nil {
		t.Errorf("nil ring: %v", a)
	}
	if a := New(nil, 4).Arcs(); a != nil {
		t.Errorf("empty ring: %v", a)
	}
	a := New([]string{"solo"}, 8).Arcs()
	if len(a) != 1 || a[0].Owner != "solo" || a[0].From != a[0].To {
		t.Errorf("one member: %+v, want one arc all round", a)
	}
}
