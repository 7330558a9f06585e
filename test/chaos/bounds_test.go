package chaos

import (
	"time"

	"github.com/ringlimit/ringlimit/failover"
)

// The bounds the scenarios assert, in one place: chaoskit.KeyBound and
// chaoskit.CutOffBound (see chaoskit's bounds.go for why they hold: a
// key's admissions over a scenario whose window covers it all are bounded
// by the number of places that held its state), and these:
//
//   - A graceful leave hands every key's state to its next owner before the
//     node leaves, and a joining node is handed its keys (issue 10): a
//     rolling restart admits nothing extra (leaveBound).
//   - While the cluster is split, each side owns every key it can see and
//     decides it from memory (partitionSideBound).

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

// maxCallLatency is the longest any call to a node that stayed up may take:
// the worst the library allows, each tier's ceiling plus the time it waits
// beyond it for the time its node spent descheduled during the call
// (failover.StallCredit: 100 ms at a 50 ms ceiling; a node under -race on a
// loaded host is descheduled that long now and then), and the margin.
var maxCallLatency = tierWorst(forwardTimeout) + tierWorst(storeTimeout) + callMargin

// tierWorst is the longest a call waits on one tier whose ceiling is
// timeout.
func tierWorst(timeout time.Duration) time.Duration { return timeout + failover.StallCredit(timeout) }
