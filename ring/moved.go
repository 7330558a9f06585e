package ring

import (
	"slices"

	"github.com/cespare/xxhash/v2"
)

// Hash is the hash that places key on every Ring: key belongs to the arc
// whose From < Hash(key) ≤ To. A store that indexes keys by it (local's
// Config.Hash) can visit the keys of an arc without a scan.
func Hash(key string) uint64 { return xxhash.Sum64String(key) }

// ownerOf is the member that owns hash h. r is not empty.
func (r *Ring) ownerOf(h uint64) string {
	return r.members[r.owner[r.searchHash(h)]]
}

// Moved returns what a change from prev to next moves for the member named
// name: gained, the arcs it owns in next and did not own in prev (Owner is
// the member that owned each in prev, "" if prev is empty); lost, the arcs
// it owned in prev and does not own in next (Owner is the member that owns
// each in next, "" if next is empty). A change that moves none of name's
// keys returns neither. The cost is in the rings' virtual nodes, not in
// keys. A nil Ring is empty.
func Moved(prev, next *Ring, name string) (gained, lost []Arc) {
	var pts []uint64
	if prev != nil {
		pts = append(pts, prev.hashes...)
	}
	if next != nil {
		pts = append(pts, next.hashes...)
	}
	slices.Sort(pts)
	pts = slices.Compact(pts)
	owner := func(r *Ring, h uint64) string {
		if r == nil || len(r.hashes) == 0 {
			return ""
		}
		return r.ownerOf(h)
	}
	add := func(arcs []Arc, from, to uint64, other string) []Arc {
		if k := len(arcs) - 1; k >= 0 && arcs[k].To == from && arcs[k].Owner == other {
			arcs[k].To = to
			return arcs
		}
		return append(arcs, Arc{From: from, To: to, Owner: other})
	}
	// Between two neighbouring points of either ring, each ring has one
	// owner: the arc (pts[i-1], pts[i]] is owned by the owner of pts[i].
	for i, p := range pts {
		from := pts[(i+len(pts)-1)%len(pts)]
		was, is := owner(prev, p), owner(next, p)
		switch {
		case was == is:
		case is == name:
			gained = add(gained, from, p, was)
		case was == name:
			lost = add(lost, from, p, is)
		}
	}
	return gained, lost
}
