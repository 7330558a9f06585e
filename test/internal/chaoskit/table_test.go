package chaoskit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// The rows are lines of test/chaos/RESULTS.md and test/netchaos/RESULTS.md
// as the suites printed them before they shared the table.
func TestRowString(t *testing.T) {
	for _, c := range []struct {
		r    chaoskit.Row
		want string
	}{{
		chaoskit.Row{
			Name: "node-kill", Nodes: 3, Calls: 11511, DeadCalls: 1, DeadErrs: 1,
			Victim:  chaoskit.Group{Keys: 8, Admitted: 80, Limit: 80, Worst: 1, Bound: 4},
			Other:   chaoskit.Group{Keys: 16, Admitted: 160, Limit: 160, Worst: 1, Bound: 1},
			Sources: map[string]int{"local": 4824, "peer": 6384, "store": 302},
			P50:     ms(0.2), P99: ms(0.9), Max: ms(11.5), Detect: ms(312.6), Recover: ms(26.1),
			Leak: []string{"n1 29→32/25→25", "n3 28→31/24→24"},
		},
		"| node-kill | 3 | 11511 | 0 | 1 / 1 | 80/80 (+0%), worst key 1.0× (bound 4×) | 160/160 (+0%), worst key 1.0× (bound 1×) | 4824 / 6384 / 302 / 0 | 0.2 / 0.9; 11.5 | 312.6 | 26.1 | n1 29→32/25→25; n3 28→31/24→24 |\n",
	}, {
		chaoskit.Row{
			Name: "store-kill", Nodes: 3, Calls: 13600,
			Victim:  chaoskit.Group{Keys: 8, Admitted: 2192, Limit: 80, Fallback: 2032, Worst: 30.3, Bound: 3},
			Other:   chaoskit.Group{Keys: 16, Admitted: 160, Limit: 160, Worst: 1, Bound: 1},
			Sources: map[string]int{"local": 4586, "peer": 6657, "store": 325, "fallback": 2032},
			P50:     ms(0.3), P99: ms(0.9), Max: ms(3.4), Detect: ms(1.8), Recover: ms(21.4),
			Leak: []string{"n1 28→31/23→24"},
		},
		"| store-kill | 3 | 13600 | 0 | 0 / 0 | 2192/80 (+2640%), worst key 30.3× (bound 3× + the 2032 fail-open) | 160/160 (+0%), worst key 1.0× (bound 1×) | 4586 / 6657 / 325 / 2032 | 0.3 / 0.9; 3.4 | 1.8 | 21.4 | n1 28→31/23→24 |\n",
	}, {
		chaoskit.Row{
			Name: "skew-steady", Nodes: 3, Calls: 5102,
			Other:   chaoskit.Group{Keys: 12, Admitted: 240, Limit: 264, Worst: 0.9, Bound: 1},
			Sources: map[string]int{"local": 1712, "peer": 3390},
			P50:     ms(1.3), P99: ms(10), Max: ms(71.3), Detect: -1, Recover: -1,
		},
		"| skew-steady | 3 | 5102 | 0 | 0 / 0 | — | 240/264 (-9%), worst key 0.9× (bound 1×) | 1712 / 3390 / 0 / 0 | 1.3 / 10.0; 71.3 | — | — | — |\n",
	}, {
		chaoskit.Row{
			Name: "skew-rolling-restart", Failed: true, Nodes: 3,
			Victim: chaoskit.Group{Keys: 12, Admitted: 252, Limit: 276, Worst: 0.9, Bound: 1.2},
		},
		"| skew-rolling-restart (FAILED) | 3 | 0 | 0 | 0 / 0 | 252/276 (-9%), worst key 0.9× (bound 1.2×) | — | 0 / 0 / 0 / 0 | 0.0 / 0.0; 0.0 | 0.0 | 0.0 | — |\n",
	}, {
		chaoskit.Row{Name: "latency-200ms", Skipped: true, Detect: -1, Recover: -1},
		"| latency-200ms (skipped) | 0 | 0 | 0 | 0 / 0 | — | — | 0 / 0 / 0 / 0 | 0.0 / 0.0; 0.0 | — | — | — |\n",
	}} {
		if got := c.r.String(); got != c.want {
			t.Errorf("Row.String:\ngot  %s\nwant %s", got, c.want)
		}
	}
}

func TestTable(t *testing.T) {
	rows := []chaoskit.Row{
		{Name: "a", Nodes: 3, Note: "the victim is n2"},
		{Name: "b", Nodes: 5},
	}
	got := chaoskit.Table(rows)
	want := chaoskit.TableHeader + rows[0].String() + rows[1].String() + "\n- a: the victim is n2\n"
	if got != want {
		t.Errorf("Table:\n%s\nwant\n%s", got, want)
	}
	if !strings.HasPrefix(chaoskit.TableHeader, "| scenario | nodes |") || strings.Count(chaoskit.TableHeader, "\n") != 2 {
		t.Errorf("TableHeader: %q", chaoskit.TableHeader)
	}
}

func TestGroupAdd(t *testing.T) {
	var g chaoskit.Group
	g.Add(&chaoskit.KeyStat{Allowed: 10, AllowedFrom: map[string]int{"local": 10}}, 10, 10)
	g.Add(&chaoskit.KeyStat{Allowed: 25, AllowedFrom: map[string]int{"local": 15, "fallback": 10}}, 10, 20)
	want := chaoskit.Group{Keys: 2, Admitted: 35, Limit: 20, Fallback: 10, Worst: 2.5, Bound: 2}
	if g != want {
		t.Errorf("Group after two keys: %+v, want %+v", g, want)
	}
	if got, want := g.String(), "35/20 (+75%), worst key 2.5× (bound 2× + the 10 fail-open)"; got != want {
		t.Errorf("Group.String() = %q, want %q", got, want)
	}
}

// The bounds of the rows of test/chaos/RESULTS.md, limit 10.
func TestBounds(t *testing.T) {
	for _, c := range []struct {
		name              string
		faults            int
		restarted         bool
		storeIncarnations int
		want              int
	}{
		{"never faulted", 0, true, 2, 10},
		{"node-kill", 1, true, 1, 40},
		{"node-sigstop", 1, false, 1, 30},
		{"node+store-kill", 1, true, 2, 50},
		{"churn, five kills", 5, true, 1, 120},
	} {
		if got := chaoskit.KeyBound(10, c.faults, c.restarted, c.storeIncarnations); got != c.want {
			t.Errorf("%s: KeyBound(10, %d, %v, %d) = %d, want %d", c.name, c.faults, c.restarted, c.storeIncarnations, got, c.want)
		}
	}
	if got := chaoskit.CutOffBound(10, 1); got != 20 {
		t.Errorf("CutOffBound(10, 1) = %d, want 20", got)
	}
	if got := chaoskit.CutOffBound(10, 2); got != 30 {
		t.Errorf("CutOffBound(10, 2) = %d, want 30", got)
	}
}
