package memstore

import "github.com/ringlimit/ringlimit"

// The floor: how a token bucket leases whether or not it is near its
// limit (docs/bucket-leases.md says why it is exact).
//
// While leases of C tokens in all are out of a token bucket of capacity B,
// its holder's own bucket has capacity B − C: its level (where a full
// bucket is level 0) never drains below C·window, the floor. A lease of c
// tokens takes them from the bucket (the level rises by c·window) and
// raises the floor by c·window; when it ends, given back or recalled
// (Return), its unused tokens come back (the level falls by them) and the
// floor falls by the lease's c. A lease whose borrower never gives it back
// is released by its holder once it expired (Return of nothing). So what
// the holder and its borrowers admit together never exceeds one bucket:
// without the floor the holder's bucket refilled to B while the borrowers
// still spent what they held.
//
// The floor is kept beside the state, as the holes are, not in it (a
// bucket's state has no free field: state.c is its epoch, wait.go), with
// the last instant any of its leases may still be spent (end: the lease's
// life and a fifth, the margin node's ledger keeps). It falls to nothing
// at end, whoever forgot to release a lease. Every decision on the key's
// token bucket settles the state to the floor first (settle), and a state
// that leaves (Export, Take, Range, Drain) carries the floor folded into
// its level: as high as a bucket that drains to the floor no sooner than
// end (the floor plus what refills until end). A holder that takes the
// state over then needs no ledger of the leases the last one gave: its
// bucket fills no further than B − C until they have ended. That only
// under-admits, by what refills until end (a second of the rule's rate at
// most), once per move.
//
// A Return counts in the floor it names (Grant.Floor) only: the floor's
// id changes whenever the floor starts again (after it lapsed, a Reset, a
// move away and back), so a lease's give-back that comes after its floor
// lapsed gives nothing back. Its tokens came back then already, as the
// bucket refilled into the room the floor had kept (given back again, the
// key would admit them twice).

// floorRec is a token bucket's floor (see above).
type floorRec struct {
	tag   uint64 // the state's tag (algorithm, index 0, window) when the floor rose
	units int64  // C·window, C the tokens of the leases out
	end   int64  // ms: the last instant a lease counted in units may be spent
	// lo and hi are the lowest and highest rule Limit it leased under:
	// how fast a level folded on its way out drains at the slowest, and
	// how fast it may drain where it goes (a rule's Limit may change
	// without starting the state afresh).
	lo, hi int64
	id     uint64 // names it (see Grant.Floor); never 0
}

// floors are a shard's token buckets' floors, by key: only keys leased.
type floors struct{ m map[string]floorRec }

// maxFloors bounds the floors a shard keeps: past it, one whose leases
// all ended is forgotten, and if none has, a token bucket declines a
// lease (Lease).
const maxFloors = 1 << 10

// settle brings st, a token bucket's state under f, to max(now, st.b): its
// level then, never below the floor before f's end (a level that drains
// at limit units a ms stops at the floor; one below it, a state started
// afresh, say, is raised to it). It reports whether the floor has ended by
// then: st is then at its level as of the end, and drains on from there as
// any bucket's, and the caller forgets f.
func (f *floorRec) settle(st *state, now, limit int64) bool {
	t := max(now, st.b)
	if st.b < f.end {
		m := min(t, f.end)
		st.a, st.b = max(drain(st.a, m-st.b, limit), f.units), m
	}
	return t >= f.end
}

// keeps is until when the floor keeps its state mattering: its end, and
// the time the floor's level takes to drain after it.
func (f *floorRec) keeps(limit int64) int64 { return f.end + ceilDiv(f.units, limit) }

// floorAt settles st, key's token-bucket state at index 0 under tag, to
// its floor at now, if the key has one (see settle), and returns until
// when the floor keeps the state mattering, 0 if it has none. The caller
// checked that the shard holds floors.
func (s *shard) floorAt(key string, tag uint64, st *state, p *params, now int64) int64 {
	f, ok := s.floors.m[key]
	if !ok || f.tag != tag {
		return 0 // (a floor under another rule lapses at its end; the state under it was started afresh)
	}
	if f.settle(st, now, p.limit) {
		delete(s.floors.m, key)
		return 0
	}
	return f.keeps(p.limit)
}

// hasFloors reports whether a decision on a token bucket at index 0 must
// look for its floor: the shard holds some.
func (s *shard) hasFloors() bool { return len(s.floors.m) != 0 }

// forgetFloor drops key's floor: its state was reset, or left with it
// folded in, or was replaced by another.
func (s *shard) forgetFloor(key string) {
	if len(s.floors.m) != 0 {
		delete(s.floors.m, key)
	}
}

// fold is st, key's exported state, with its floor folded in (see above):
// a token bucket's at index 0 whose floor has not ended at now has a
// level that drains to the floor no sooner than the floor's end.
func (s *shard) fold(key string, tag uint64, st State, now int64) State {
	if len(s.floors.m) == 0 || st.Algorithm != ringlimit.TokenBucket || st.Index != 0 {
		return st
	}
	f, ok := s.floors.m[key]
	if !ok || f.tag != tag {
		return st
	}
	x := state{a: st.A, b: st.B}
	if !f.settle(&x, now, f.lo) {
		x.a = max(x.a, f.units+(f.end-x.b)*f.hi)
	}
	st.A, st.B = x.a, x.b
	st.Until = max(st.Until, x.b+ceilDiv(x.a, f.lo))
	return st
}

// sweepFloors forgets the floors that ended before now.
func (s *shard) sweepFloors(now int64) {
	for k, f := range s.floors.m {
		if f.end <= now {
			delete(s.floors.m, k)
		}
	}
}
