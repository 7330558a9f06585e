package ring

import "slices"

// Arc is a stretch of hash space that one member owns: the keys whose
// xxhash falls after From and at or before To, going up and wrapping from
// the largest uint64 to zero. The arc that crosses zero has From ≥ To.
type Arc struct {
	From, To uint64
	Owner    string
}

// Arcs returns the ring's ownership as arcs in hash order, the first one
// being the arc that ends at the smallest virtual node and so crosses zero.
// Neighbouring virtual nodes of the same member make one arc. A ring of one
// member is a single arc with From == To; an empty ring has none.
// Arcs allocates; it is for views of the ring, not for routing.
func (r *Ring) Arcs() []Arc {
	if r == nil || len(r.hashes) == 0 {
		return nil
	}
	n := len(r.hashes)
	// Start at a virtual node whose predecessor has another owner, so that
	// no run of one owner is split in two by where the loop starts.
	first := 0
	for i := range n {
		if r.owner[i] != r.owner[(i+n-1)%n] {
			first = i
			break
		}
	}
	var arcs []Arc
	for k := range n {
		i := (first + k) % n
		from := r.hashes[(i+n-1)%n]
		if k > 0 && r.owner[i] == r.owner[(i+n-1)%n] {
			arcs[len(arcs)-1].To = r.hashes[i]
			continue
		}
		arcs = append(arcs, Arc{From: from, To: r.hashes[i], Owner: r.members[r.owner[i]]})
	}
	// Rotate so that the arc crossing zero comes first.
	for j, a := range arcs {
		if a.From >= a.To {
			return slices.Concat(arcs[j:], arcs[:j])
		}
	}
	return arcs
}
