package chaos

import "time"

// The bounds the scenarios assert, in one place.
//
// A key's admissions over a scenario (the rule's window covers it all) are
// bounded by the number of places that held its state, each of which may
// admit what it did not know of:
//
//   - An owner that is never faulted decides every call for its keys from
//     its own memory: exactly the limit, whatever happens elsewhere.
//   - A graceful leave hands every key's state to its next owner before the
//     node leaves, and a joining node is handed its keys (issue 10): a
//     rolling restart admits nothing extra (leaveBound).
//   - A crash loses what the owner admitted since its last write-behind to
//     the store (every 100 ms). The store, then the successor (which loads
//     from the store), then a restarted owner (which pulls from the
//     successor) each continue from the state they are given, so each may
//     admit at most what that lag let through. At this suite's load, about
//     12 calls per key per 100 ms against a limit of 10, one interval can
//     hold a whole limit, so the terms stay at one limit each (measured:
//     1.0×, nothing extra).
//   - Decisions of the fail-open policy (Source "fallback": neither the owner
//     nor the store could answer) admit everything by design; the bound adds
//     them as counted.
const (
	successorFactor = 1 // limits a successor may admit per fault of the owner
	restartFactor   = 1 // limits a restarted owner may admit per restart
)

// keyBound is the most a key may admit: limit if its owner was never
// faulted; else a limit for the owner, one per store incarnation, and per
// fault of the owner one for the successor and (if the owner restarted) one
// for its new incarnation.
func keyBound(limit, faults int, restarted bool, storeIncarnations int) int {
	if faults == 0 {
		return limit
	}
	per := successorFactor
	if restarted {
		per += restartFactor
	}
	return limit * (1 + storeIncarnations + faults*per)
}

// cutOffBound is the most a key may admit whose owner stays in every ring
// but cannot be reached by the other nodes (its peer links cut): the owner
// decides its own callers' calls, the others' go to the store, which holds
// what the owner last wrote behind but is not read back by the owner: one
// limit per store incarnation; fail-open admissions are added as counted.
func cutOffBound(limit, storeIncarnations int) int { return limit * (1 + storeIncarnations) }

// leaveBound is the most a key may admit over graceful leaves and joins:
// its state goes with it, so exactly the limit.
func leaveBound(limit int) int { return limit }

// partitionSideBound is the most a key first used while the cluster is split
// may admit on each side: every side owns every key it can see, and decides
// it from memory, exactly.
func partitionSideBound(limit int) int { return limit }

// callMargin is how long a caller may wait beyond the worst the library
// allows (the forward timeout, then the store timeout): the HTTP round trip
// from the harness to a node process, and scheduling on a loaded 2-core
// machine running five node processes, the store and a -race harness.
const callMargin = 250 * time.Millisecond

// maxCallLatency is the longest any call to a node that stayed up may take.
const maxCallLatency = forwardTimeout + storeTimeout + callMargin

// Leak slack: after a scenario, with the load stopped, a surviving node's
// goroutines and open files must come back to within this much of what they
// were before the fault.
const (
	goroutineSlack = 10
	fdSlack        = 5
)
