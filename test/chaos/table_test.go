package chaos

import (
	"fmt"
	"strings"
	"time"
)

// group is the admissions of a group of keys.
type group struct {
	keys, admitted, limit int
	fallback              int     // admitted by the fail-open policy
	worst                 float64 // the most any key admitted, in limits
	bound                 float64 // the largest bound asserted, in limits
}

func (g group) String() string {
	if g.keys == 0 {
		return "—"
	}
	over := 100 * float64(g.admitted-g.limit) / float64(g.limit)
	s := fmt.Sprintf("%d/%d (%+.0f%%), worst key %.1f× (bound %.0f×)", g.admitted, g.limit, over, g.worst, g.bound)
	if g.fallback > 0 {
		s = fmt.Sprintf("%d/%d (%+.0f%%), worst key %.1f× (bound %.0f× + the %d fail-open)", g.admitted, g.limit, over, g.worst, g.bound, g.fallback)
	}
	return s
}

// row is one scenario's figures.
type row struct {
	name                string
	failed              bool
	nodes               int
	calls, errs         int
	deadCalls, deadErrs int
	victim, other       group
	sources             map[string]int
	p50, p99, max       time.Duration
	detect, recover     time.Duration // -1: not applicable
	leak                []string      // survivor: goroutines before→after / fds before→after
	note                string
}

func ms(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

func renderTable(rows []row, cmd string, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# ringlimit chaos results\n\n")
	fmt.Fprintf(&b, "Run %s UTC with `%s` (%s in all; add `-chaos.results=RESULTS.md` to write this file). Real node processes (test/chaos/chaosnode) and a real %s on loopback; ",
		time.Now().UTC().Format("2006-01-02 15:04"), cmd, took.Round(time.Second), storeName())
	fmt.Fprintf(&b, "load through each node's HTTP endpoint; rule %s, limit %d per %s (the window covers the whole scenario), %d keys per node; forward and store timeouts %s and %s.\n\n",
		ruleAlgorithm, ruleLimit, ruleWindow, keysPerNode, forwardTimeout, storeTimeout)
	b.WriteString("| scenario | nodes | calls | caller errors | to downed node: calls / errors | victim's keys: admitted/limit | other keys: admitted/limit | local / peer / store / fallback | latency during fault p50 / p99 ms; max of run | detect ms | recover ms | survivors: goroutines / fds before→after |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		name := r.name
		if r.failed {
			name += " (FAILED)"
		}
		leak := strings.Join(r.leak, "; ")
		if leak == "" {
			leak = "—"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d / %d | %s | %s | %d / %d / %d / %d | %s / %s; %s | %s | %s | %s |\n",
			name, r.nodes, r.calls, r.errs, r.deadCalls, r.deadErrs, r.victim, r.other,
			r.sources["local"], r.sources["peer"], r.sources["store"], r.sources["fallback"],
			ms(r.p50), ms(r.p99), ms(r.max), ms(r.detect), ms(r.recover), leak)
	}
	b.WriteString("\n")
	for _, r := range rows {
		if r.note != "" {
			fmt.Fprintf(&b, "- %s: %s\n", r.name, r.note)
		}
	}
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
