package chaos

import (
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// row is one scenario's figures: a row of the table.
type row = chaoskit.Row

func renderTable(rows []row, cmd string, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# ringlimit chaos results\n\n")
	fmt.Fprintf(&b, "Run %s UTC with `%s` (%s in all; add `-chaos.results=RESULTS.md` to write this file). Real node processes (test/chaos/chaosnode) and a real %s on loopback; ",
		time.Now().UTC().Format("2006-01-02 15:04"), cmd, took.Round(time.Second), chaoskit.StoreName())
	fmt.Fprintf(&b, "load through each node's HTTP endpoint; rule %s, limit %d per %s (the window covers the whole scenario), %d keys per node; forward and store timeouts %s and %s.\n\n",
		ruleAlgorithm, ruleLimit, ruleWindow, keysPerNode, forwardTimeout, storeTimeout)
	b.WriteString(chaoskit.Table(rows))
	b.WriteString(`
Columns: *caller errors* are errors returned by nodes the harness had not taken down (must be 0);
calls in flight to a node when the harness killed, stopped or terminated it are counted apart.
*Victim's keys* are those the faulted node owned before the fault; *over-admission* is admitted
beyond the limit summed over the group; *bound* is what the test asserts per key (see bounds_test.go).
*Detect*: from the fault until every other node's ring dropped the victim. *Recover*: from the
restart (or heal) until every node sees every member again. The store is on the decision path only
for keys whose owner cannot be reached, so the store scenarios cut the peer links to one node (gossip still
flows) from before the fault to after it: there *detect* is from the fault until the first fail-open
decision, and *recover* from the restart (or SIGCONT) until the first decision by the store again.
`)
	return b.String()
}
