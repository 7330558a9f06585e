package hold

import "testing"

// Descends tells a late copy or an ancestor branch (dropped when it arrives
// where a newer state was passed on) from a state with something new.
func TestDescends(t *testing.T) {
	v := Fresh(1000, 7)
	next := v.Next(2000)
	fork := v.Fork(9)
	for _, c := range []struct {
		name string
		v, w Version
		want bool
	}{
		{"a copy of itself", v, v, true},
		{"a later hand-over over an earlier one", next, v, true},
		{"an earlier hand-over over a later one", v, next, false},
		{"a fork over its source", fork, v, true},
		{"a fork over its source passed on since (a relay's raised epoch)", fork, v.Next(5000), true},
		{"a source, however new, over a fork of it", v.Next(5000), fork, false},
		{"a fork passed on over its source passed on, the source's epoch ahead", fork.Next(2000), v.Next(2001), true},
		{"a state started apart", Fresh(3000, 8), v, false},
	} {
		if got := c.v.Descends(c.w); got != c.want {
			t.Errorf("%s: %+v.Descends(%+v) = %v, want %v", c.name, c.v, c.w, got, c.want)
		}
	}
	if fork.Covers(v) != true || v.Covers(fork) {
		t.Errorf("a fork must count its source's starts and one more: %+v, %+v", fork, v)
	}
}
