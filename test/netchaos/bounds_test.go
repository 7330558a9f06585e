package netchaos

import (
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// The bounds the failure scenarios assert, as test/chaos's (chaoskit's
// bounds.go: a key's admissions over a scenario whose window covers it all are
// bounded by the places that held its state, each of which may admit what
// it did not know of), with the network's faults added:
//
//   - A node that others drop from their rings (partition, gossip port
//     blocked, loss or latency enough to fail its probes) and that keeps
//     serving its own callers is one more holder of every key the two sides
//     disagree on: one fault (ringBound).
//   - A node whose peer links fail while every ring keeps it (peer port
//     blocked, asymmetric partition, a forward's packet lost or delayed past
//     the forward timeout) sends those calls to the store, which holds what
//     the owner wrote behind but is not read back by the owner: one limit
//     per store incarnation (chaoskit.CutOffBound).
//     That holds for any key the store decided some calls of (a forward
//     that failed or timed out, on a merely loaded machine too): finish
//     holds every such key to chaoskit.CutOffBound at least.
//   - Fail-open admissions (Source "fallback") admit everything by design;
//     they are added as counted.

// ringBound is a key whose holders may disagree once: the owner, the store,
// and the other side.
func ringBound(limit int) int { return chaoskit.KeyBound(limit, 1, false, 1) }

// flapBound is a key whose owner others dropped from their rings drops
// times and took back each time (a node that stays up but whose gossip
// fails now and then: packet loss, latency, an asymmetric partition): each
// drop may make another node its holder for a while, which loads what the
// store holds (and the store may hold less than the owner knows: the
// owner's write-behind is late or lost), so one limit per drop. A key whose
// owner was never dropped gets base.
func flapBound(limit, drops, base int) int {
	if drops == 0 {
		return base
	}
	return chaoskit.KeyBound(limit, drops, false, 1)
}

// callMargin is how long a caller may wait beyond the worst the library
// allows (the forward timeout's ceiling, then the store timeout's): the HTTP round trip
// from the harness to a container, and scheduling on a loaded 2-core
// machine running five node containers, the store and a -race harness.
// Asserted on the 99th percentile of every scenario's calls to nodes that
// stayed up.
const callMargin = 300 * time.Millisecond

// stallMargin is the same for the slowest call of a scenario: on a machine
// shared with other work, a container or the harness is sometimes not
// scheduled for a while (measured: 0.74 s at a load average of 25 on 2
// cores). A call that waited on a hung peer or store without its timeout
// would take longer still.
const stallMargin = 1500 * time.Millisecond

// finish bounds the calls to nodes that stayed up: the 99th percentile by
// the cluster's forward + store ceilings + callMargin, the slowest by the
// same + stallMargin.
