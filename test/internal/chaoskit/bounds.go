package chaoskit

// The bounds both suites assert. A key's admissions over a scenario (the
// rule's window covers it all) are bounded by the number of places that
// held its state, each of which may admit what it did not know of:
//
//   - An owner that is never faulted decides every call for its keys from
//     its own memory: exactly the limit, whatever happens elsewhere.
//   - A crash loses what the owner admitted since its last write-behind to
//     the store (every 100 ms). The store, then the successor (which loads
//     from the store), then a restarted owner (which pulls from the
//     successor) each continue from the state they are given, so each may
//     admit at most what that lag let through. At test/chaos's load, about
//     12 calls per key per 100 ms against a limit of 10, one interval can
//     hold a whole limit, so the terms stay at one limit each (measured:
//     1.0×, nothing extra).
//   - Decisions of the fail-open policy (Source "fallback": neither the
//     owner nor the store could answer) admit everything by design; the
//     suites add them as counted.
//
// Each suite adds the bounds of its own faults (leaves, partitions, the
// network's) in its bounds_test.go.
const (
	successorFactor = 1 // limits a successor may admit per fault of the owner
	restartFactor   = 1 // limits a restarted owner may admit per restart
)

// KeyBound is the most a key may admit: limit if its owner was never
// faulted; else a limit for the owner, one per store incarnation, and per
// fault of the owner one for the successor and (if the owner restarted)
// one for its new incarnation.
func KeyBound(limit, faults int, restarted bool, storeIncarnations int) int {
	if faults == 0 {
		return limit
	}
	per := successorFactor
	if restarted {
		per += restartFactor
	}
	return limit * (1 + storeIncarnations + faults*per)
}

// CutOffBound is the most a key may admit whose owner stays in every ring
// but some calls for which go to the store (the owner's peer links cut, or
// a forward that failed or timed out): the owner decides its own callers'
// calls, the store decides the others' from what the owner last wrote
// behind, which the owner does not read back: one limit per store
// incarnation. Fail-open admissions are added as counted.
func CutOffBound(limit, storeIncarnations int) int { return limit * (1 + storeIncarnations) }

// Leak slack: after a scenario, with the load stopped, a surviving node's
// goroutines and open files must come back to within this much of what
// they were before the fault (see Cluster.CheckLeaks).
const (
	GoroutineSlack = 10
	FDSlack        = 5
)
