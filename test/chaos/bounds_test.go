package chaos

import "time"

// The bounds the scenarios assert, in one place.
//
// A key's admissions over a scenario (the rule's window covers it all) are
// bounded by the number of places that held its state, each of which may
// admit a whole limit when it starts empty. On this branch:
//
//   - An owner that is never faulted decides every call for its keys from
//     its own memory: exactly the limit, whatever happens elsewhere.
//   - While a faulted owner is not yet detected (or is cut off), callers fall
//     back to the store. The store holds nothing of the key, because nothing
//     is written behind to it yet (issue 10): up to one more limit per store
//     incarnation (its state survives the node faults, not its own restart).
//   - Once the fault is detected the key's successor on the ring takes it
//     over from empty, because nothing is handed off yet (issue 10): one more
//     limit per fault of the owner.
//   - A killed or restarted owner comes back empty and takes its keys back:
//     one more limit per restart. A SIGSTOPped owner keeps its memory.
//   - Decisions of the fail-open policy (Source "fallback": neither the owner
//     nor the store could answer) admit everything by design; the bound adds
//     them as counted.
//
// When issue 10 lands (state handed to the next owner on a graceful leave,
// and written behind to the store), tighten here: a graceful leave then
// admits nothing extra (restartFactor and successorFactor 0 for leaves), and
// the store and successor terms shrink to what the write-behind lag lets
// through.
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
// decides its own callers' calls exactly, the others' go to the store, one
// limit per store incarnation (nothing is written behind yet, issue 10);
// fail-open admissions are added as counted.
func cutOffBound(limit, storeIncarnations int) int { return limit * (1 + storeIncarnations) }

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
