package memstore

import (
	"slices"

	"github.com/ringlimit/ringlimit"
)

// Merge returns one state that counts the hits of both a and b: the state of
// one key that two nodes started independently (each admitting from a fresh
// state while they disagreed on who owns the key), so that from the merge on
// the key admits what one limiter would have admitted for all their calls.
//
// It must not be given two copies of one state (it would count their common
// hits twice, admitting less than it should): node tells them apart by their
// versions' origins.
//
// States under different rules (algorithm or window) do not merge: the one
// that matters longer (the later Until) stands. Each index of a key (State.More) merges with the same index.
func Merge(a, b State) State {
	// Both sides flattened by index (a state and its More), merged index
	// by index, and put back with the lowest index on top, as Take does.
	var byIdx [ringlimit.MaxRules]*State
	var order []int
	for _, side := range [2]State{a, b} {
		more := side.More
		side.More = nil
		for _, st := range append([]State{side}, more...) {
			st.More = nil
			i := st.Index
			if uint(i) >= ringlimit.MaxRules {
				continue
			}
			if byIdx[i] == nil {
				st := st
				byIdx[i] = &st
				order = append(order, i)
				continue
			}
			m := merge1(*byIdx[i], st)
			byIdx[i] = &m
		}
	}
	slices.Sort(order)
	out := *byIdx[order[0]]
	for _, i := range order[1:] {
		out.More = append(out.More, *byIdx[i])
	}
	return out
}

func merge1(a, b State) State {
	if a.Algorithm != b.Algorithm || a.Window != b.Window || a.Index != b.Index {
		// Under different rules (a rule changed while the key moved):
		// the state that matters longer stands, the other starts afresh.
		if b.Until > a.Until {
			return b
		}
		return a
	}
	m := a
	m.Until = max(a.Until, b.Until)
	switch a.Algorithm {
	case ringlimit.TokenBucket, ringlimit.LeakyBucket:
		// A level drains at the rule's rate, which the state does not
		// carry: both levels count as of the later update. The earlier
		// one has drained a little since, so the merge may deny a little
		// longer than one limiter would; it never admits more.
		m.A, m.B = a.A+b.A, max(a.B, b.B)
	case ringlimit.FixedWindow:
		switch {
		case a.A == b.A:
			m.B = a.B + b.B
		case b.A > a.A:
			m.A, m.B = b.A, b.B
		}
	case ringlimit.SlidingWindow:
		// Align both to the later window: an earlier current count is the
		// later one's previous count, or gone.
		if b.A > a.A {
			a, b = b, a
		}
		m.A, m.B, m.C = a.A, a.B, a.C
		switch a.A - b.A {
		case 0:
			m.B, m.C = a.B+b.B, a.C+b.C
		case 1:
			m.C = a.C + b.B
		}
	case ringlimit.SlidingLog:
		m.Log = mergeLogs(a.Log, b.Log)
	}
	return m
}

// mergeLogs merges two logs, oldest first with strictly increasing stamps,
// into one: the counts of a stamp both hold add up.
func mergeLogs(x, y []ringlimit.LogEntry) []ringlimit.LogEntry {
	out := make([]ringlimit.LogEntry, 0, len(x)+len(y))
	for len(x) > 0 || len(y) > 0 {
		switch {
		case len(y) == 0 || len(x) > 0 && x[0].Stamp < y[0].Stamp:
			out, x = append(out, x[0]), x[1:]
		case len(x) == 0 || y[0].Stamp < x[0].Stamp:
			out, y = append(out, y[0]), y[1:]
		default:
			out = append(out, ringlimit.LogEntry{Stamp: x[0].Stamp, Count: x[0].Count + y[0].Count})
			x, y = x[1:], y[1:]
		}
	}
	return out
}
