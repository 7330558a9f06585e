package netchaos

import (
	"fmt"
	"math"
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
	bound := fmt.Sprintf("%.0f×", g.bound)
	if math.Abs(g.bound-math.Round(g.bound)) >= 0.05 {
		bound = fmt.Sprintf("%.1f×", g.bound)
	}
	s := fmt.Sprintf("%d/%d (%+.0f%%), worst key %.1f× (bound %s)", g.admitted, g.limit, over, g.worst, bound)
	if g.fallback > 0 {
		s = fmt.Sprintf("%d/%d (%+.0f%%), worst key %.1f× (bound %s + the %d fail-open)", g.admitted, g.limit, over, g.worst, bound, g.fallback)
	}
	return s
}

// row is one scenario's figures, in test/chaos's RESULTS.md format.
type row struct {
	name                string
	failed, skipped     bool
	nodes               int
	calls, errs         int
	deadCalls, deadErrs int
	victim, other       group
	sources             map[string]int
	p50, p99, max       time.Duration
	detect, recover     time.Duration // -1: not applicable
	leak                []string      // survivor: goroutines before→after / fds before→after
	note                string
	cutOff              int            // keys held to the cut-off bound because the store decided some of their calls
	drops               map[string]int // node → the most times one ring dropped it
}

func ms(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

const tableHeader = "| scenario | nodes | calls | caller errors | to downed node: calls / errors | victim's keys: admitted/limit | other keys: admitted/limit | local / peer / store / fallback | latency during fault p50 / p99 ms; max of run | detect ms | recover ms | survivors: goroutines / fds before→after |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"

func (r row) String() string {
	name := r.name
	switch {
	case r.failed:
		name += " (FAILED)"
	case r.skipped:
		name += " (skipped)"
	}
	leak := strings.Join(r.leak, "; ")
	if leak == "" {
		leak = "—"
	}
	return fmt.Sprintf("| %s | %d | %d | %d | %d / %d | %s | %s | %d / %d / %d / %d | %s / %s; %s | %s | %s | %s |\n",
		name, r.nodes, r.calls, r.errs, r.deadCalls, r.deadErrs, r.victim, r.other,
		r.sources["local"], r.sources["peer"], r.sources["store"], r.sources["fallback"],
		ms(r.p50), ms(r.p99), ms(r.max), ms(r.detect), ms(r.recover), leak)
}

func renderTable(rows []row) string {
	var b strings.Builder
	b.WriteString(tableHeader)
	for _, r := range rows {
		b.WriteString(r.String())
	}
	b.WriteString("\n")
	for _, r := range rows {
		note := r.note
		if len(r.drops) > 0 {
			note += "; rings dropped a node " + dropNote(r.drops)
		}
		if r.cutOff > 0 {
			note += fmt.Sprintf("; %d keys had store decisions (their owner's forward failed or timed out) and are held to the cut-off bound", r.cutOff)
		}
		if note != "" {
			fmt.Fprintf(&b, "- %s: %s\n", r.name, strings.TrimPrefix(note, "; "))
		}
	}
	return b.String()
}
