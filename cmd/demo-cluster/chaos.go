package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// phase is a stretch of a run between two events, with what the generator
// saw during it.
type phase struct {
	Name  string
	Whole bool // every node and the store up: the limit must hold
	start time.Time
	end   time.Time
	counters
}

// step is one action of the scripted scenario, at a fraction of the run.
type step struct {
	at     float64 // of -duration
	action string  // a stdin command: "k 2", "r 2", "s", "S"
	phase  string  // the phase it begins
	whole  bool
}

// chaosScript kills a node, restarts it, kills the store and restarts it.
func chaosScript(nodes int) []step {
	victim := fmt.Sprint(min(2, nodes))
	return []step{
		{0.20, "k " + victim, "node " + victim + " killed", false},
		{0.40, "r " + victim, "node " + victim + " back", true},
		{0.60, "s", "store killed", false},
		{0.80, "S", "store back", true},
	}
}

// chaosSpan is how long the scripted chaos takes when started by the c
// command or the dashboard's button.
const chaosSpan = 30 * time.Second

// timedStep is a step of the script due at an instant.
type timedStep struct {
	at     time.Time
	action string
}

// schedule spreads script over span from start.
func schedule(script []step, start time.Time, span time.Duration) []timedStep {
	out := make([]timedStep, 0, len(script))
	for _, s := range script {
		out = append(out, timedStep{at: start.Add(time.Duration(s.at * float64(span))), action: s.action})
	}
	return out
}

// describe lists a schedule's actions with their delays from now.
func describe(script []timedStep, now time.Time) string {
	var b strings.Builder
	for i, s := range script {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q in %s", s.action, s.at.Sub(now).Round(time.Second))
	}
	return b.String()
}

// settle is how long after a phase starts its windows are not held to the
// limit: the ring and the breakers need a moment to agree.
const settle = 1500 * time.Millisecond

// phaseSummary is one phase in the final report.
type phaseSummary struct {
	Name     string            `json:"name"`
	Whole    bool              `json:"whole"`
	StartS   float64           `json:"start_s"`
	EndS     float64           `json:"end_s"`
	Requests uint64            `json:"requests"`
	Allowed  uint64            `json:"allowed"`
	Denied   uint64            `json:"denied"`
	Errors   uint64            `json:"errors"`
	ToKilled uint64            `json:"to_killed_node"`
	Dropped  uint64            `json:"dropped"`
	Sources  map[string]uint64 `json:"sources"`
	Check    checkSummary      `json:"check"`
	LastErr  string            `json:"last_error,omitempty"`
}

// checkSummary holds the admitted /v1/allow hits per key and fixed window
// against the limit, for the windows wholly inside a phase (after settle).
type checkSummary struct {
	Limit       int          `json:"limit"`
	Windows     int          `json:"windows"`
	MaxAdmitted int          `json:"max_admitted"`
	OverLimit   int          `json:"over_limit"`
	Over        []overWindow `json:"over,omitempty"` // all_windows only: the first 10
}

// summary is the final report, printed as one JSON line.
type summary struct {
	Store     string  `json:"store"`
	Nodes     int     `json:"nodes"`
	NodesUp   int     `json:"nodes_up"`
	DurationS float64 `json:"duration_s"`
	Requests  uint64  `json:"requests"`
	Errors    uint64  `json:"errors"`
	// AllWindows holds every key-window of the run against the limit,
	// including those that straddle a failure.
	AllWindows checkSummary   `json:"all_windows"`
	Phases     []phaseSummary `json:"phases"`
}

// checkAll holds every counted key-window against the limit, and lists the
// first few over it.
// sources, if not nil, says who decided a window's hits.
func checkAll(windows map[checkWindowKey]int, sources func(checkWindowKey) map[string]int, start time.Time) checkSummary {
	c := checkSummary{Limit: checkLimit}
	for k, n := range windows {
		c.Windows++
		c.MaxAdmitted = max(c.MaxAdmitted, n)
		if n > checkLimit {
			c.OverLimit++
			c.Over = append(c.Over, overWindow{Key: k.key, AtS: round1(time.UnixMilli(k.window * checkWindow.Milliseconds()).Sub(start)), Admitted: n, window: k.window})
		}
	}
	slices.SortFunc(c.Over, func(a, b overWindow) int {
		return cmp.Or(cmp.Compare(a.AtS, b.AtS), cmp.Compare(a.Key, b.Key))
	})
	if len(c.Over) > 10 {
		c.Over = c.Over[:10]
	}
	for i := range c.Over {
		if sources == nil {
			break
		}
		c.Over[i].Sources = sources(checkWindowKey{c.Over[i].Key, c.Over[i].window})
	}
	return c
}

// overWindow is a key's window in which more than the limit was admitted.
type overWindow struct {
	Key      string  `json:"key"`
	AtS      float64 `json:"at_s"` // the window's start, from the start of the run
	Admitted int     `json:"admitted"`
	// Sources counts the admitted hits by who decided them.
	Sources map[string]int `json:"sources,omitempty"`
	window  int64
}

func summarize(phases []*phase, windows map[checkWindowKey]int, start time.Time) []phaseSummary {
	var out []phaseSummary
	for _, p := range phases {
		s := phaseSummary{Name: p.Name, Whole: p.Whole,
			StartS: round1(p.start.Sub(start)), EndS: round1(p.end.Sub(start)),
			Requests: p.Requests.Load(), Allowed: p.Allowed.Load(), Denied: p.Denied.Load(),
			Errors: p.Errors.Load(), ToKilled: p.ToKilled.Load(), Dropped: p.Dropped.Load(),
			Sources: map[string]uint64{}, Check: checkSummary{Limit: checkLimit}}
		for src := range p.Sources {
			s.Sources[sourceName(src)] = p.Sources[src].Load()
		}
		if m := p.LastErrMsg.Load(); m != nil {
			s.LastErr = *m
		}
		w := checkWindow.Milliseconds()
		from, to := p.start.Add(settle).UnixMilli(), p.end.UnixMilli()
		for k, n := range windows {
			if k.window*w < from || (k.window+1)*w > to {
				continue
			}
			s.Check.Windows++
			s.Check.MaxAdmitted = max(s.Check.MaxAdmitted, n)
			if n > checkLimit {
				s.Check.OverLimit++
			}
		}
		out = append(out, s)
	}
	return out
}

func round1(d time.Duration) float64 { return float64(d.Milliseconds()/100) / 10 }
