package chaoskit

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/valkeytest"
)

// Group is the admissions of a group of keys (the victim's, the others').
type Group struct {
	Keys, Admitted, Limit int
	Fallback              int     // admitted by the fail-open policy
	Worst                 float64 // the most any key admitted, in limits
	Bound                 float64 // the largest bound asserted, in limits
}

// Add counts a key in the group: what it admitted against limit, and
// bound, the most it may admit but for its fail-open admissions.
func (g *Group) Add(ks *KeyStat, limit, bound int) {
	g.Keys++
	g.Admitted += ks.Allowed
	g.Limit += limit
	g.Fallback += ks.AllowedFrom["fallback"]
	g.Worst = max(g.Worst, float64(ks.Allowed)/float64(limit))
	g.Bound = max(g.Bound, float64(bound)/float64(limit))
}

// String is the group's cell of the table: "—" for no keys; a bound that
// is not a whole number of limits is shown to a tenth.
func (g Group) String() string {
	if g.Keys == 0 {
		return "—"
	}
	over := 100 * float64(g.Admitted-g.Limit) / float64(g.Limit)
	bound := fmt.Sprintf("%.0f×", g.Bound)
	if math.Abs(g.Bound-math.Round(g.Bound)) >= 0.05 {
		bound = fmt.Sprintf("%.1f×", g.Bound)
	}
	if g.Fallback > 0 {
		return fmt.Sprintf("%d/%d (%+.0f%%), worst key %.1f× (bound %s + the %d fail-open)", g.Admitted, g.Limit, over, g.Worst, bound, g.Fallback)
	}
	return fmt.Sprintf("%d/%d (%+.0f%%), worst key %.1f× (bound %s)", g.Admitted, g.Limit, over, g.Worst, bound)
}

// Row is one scenario's figures: a row of the table.
type Row struct {
	Name                string
	Failed, Skipped     bool
	Nodes               int
	Calls, Errs         int
	DeadCalls, DeadErrs int
	Victim, Other       Group
	Sources             map[string]int
	P50, P99, Max       time.Duration
	Detect, Recover     time.Duration // -1: not applicable
	Leak                []string      // survivor: goroutines before→after / fds before→after
	Note                string
}

// Report fills r's figures of calls from res: the counts, the sources,
// p50 and p99 of the calls started in [from, to) (the fault), and the
// slowest of all. It fails t if a node the harness had not taken down
// answered an error, and returns the latencies of all the calls to nodes
// that stayed up, sorted, for the suite's latency bounds.
func (r *Row) Report(t testing.TB, res *Result, from, to time.Time) []time.Duration {
	t.Helper()
	r.Calls, r.Errs, r.DeadCalls, r.DeadErrs = res.Calls, res.Errs, res.DeadCalls, res.DeadErrs
	r.Sources = res.Sources
	// Callers of nodes that stayed up never see an error.
	if res.Errs > 0 {
		t.Errorf("%d caller errors from nodes that were up, e.g. %q", res.Errs, res.ErrSamples)
	}
	during := res.Latencies(from, to)
	all := res.Latencies(time.Time{}, time.Now().Add(time.Hour))
	r.P50, r.P99 = Percentile(during, 0.50), Percentile(during, 0.99)
	if len(all) > 0 {
		r.Max = all[len(all)-1]
	}
	return all
}

func ms(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

// TableHeader is the table's header and its separator line.
const TableHeader = "| scenario | nodes | calls | caller errors | to downed node: calls / errors | victim's keys: admitted/limit | other keys: admitted/limit | local / peer / store / fallback | latency during fault p50 / p99 ms; max of run | detect ms | recover ms | survivors: goroutines / fds before→after |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"

// String is the row's line of the table, with its newline.
func (r Row) String() string {
	name := r.Name
	switch {
	case r.Failed:
		name += " (FAILED)"
	case r.Skipped:
		name += " (skipped)"
	}
	leak := strings.Join(r.Leak, "; ")
	if leak == "" {
		leak = "—"
	}
	return fmt.Sprintf("| %s | %d | %d | %d | %d / %d | %s | %s | %d / %d / %d / %d | %s / %s; %s | %s | %s | %s |\n",
		name, r.Nodes, r.Calls, r.Errs, r.DeadCalls, r.DeadErrs, r.Victim, r.Other,
		r.Sources["local"], r.Sources["peer"], r.Sources["store"], r.Sources["fallback"],
		ms(r.P50), ms(r.P99), ms(r.Max), ms(r.Detect), ms(r.Recover), leak)
}

// Table returns the table of rows: the header, a line a row, a blank line,
// then "- name: note" for each row with a note.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString(TableHeader)
	for _, r := range rows {
		b.WriteString(r.String())
	}
	b.WriteString("\n")
	for _, r := range rows {
		if r.Note != "" {
			fmt.Fprintf(&b, "- %s: %s\n", r.Name, r.Note)
		}
	}
	return b.String()
}

// StoreName is the name of the store's server binary (valkey-server or
// redis-server), for the tables' prose; "store" if there is none.
func StoreName() string {
	b := valkeytest.Binary()
	if b == "" {
		return "store"
	}
	return b[strings.LastIndex(b, "/")+1:]
}
