package ring

import (
	"fmt"
	"testing"
)

// in reports whether h falls in arc a: From < h ≤ To, going round past the
// largest hash; From == To is the whole ring.
func in(a Arc, h uint64) bool {
	switch {
	case a.From == a.To:
		return true
	case a.From < a.To:
		return a.From < h && h <= a.To
	}
	return h > a.From || h <= a.To
}

// Moved's arcs hold exactly the keys whose owner changed to or from the
// member, with the other owner named, for joins, leaves and no change.
func TestMovedMatchesOwner(t *testing.T) {
	keys := make([]string, 20000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	rings := map[string]*Ring{
		"empty": New(nil, 64),
		"a":     New([]string{"a"}, 64),
		"ab":    New([]string{"a", "b"}, 64),
		"abc":   New([]string{"a", "b", "c"}, 64),
		"abd":   New([]string{"a", "b", "d"}, 64),
		"bcd":   New([]string{"b", "c", "d"}, 64),
	}
	for pn, prev := range rings {
		for nn, next := range rings {
			for _, name := range []string{"a", "b", "c"} {
				gained, lost := Moved(prev, next, name)
				for _, k := range keys {
					h, was, is := Hash(k), prev.Owner(k), next.Owner(k)
					wantGain, wantLose := is == name && was != name, was == name && is != name
					var g, l []Arc
					for _, a := range gained {
						if in(a, h) {
							g = append(g, a)
						}
					}
					for _, a := range lost {
						if in(a, h) {
							l = append(l, a)
						}
					}
					if wantGain != (len(g) == 1) || wantLose != (len(l) == 1) || len(g) > 1 || len(l) > 1 {
						t.Fatalf("%s -> %s, %s, key %s (%s -> %s): in %d gained and %d lost arcs",
							pn, nn, name, k, was, is, len(g), len(l))
					}
					if wantGain && g[0].Owner != was || wantLose && l[0].Owner != is {
						t.Fatalf("%s -> %s, %s, key %s: arc names %+v %+v, want %q / %q", pn, nn, name, k, g, l, was, is)
					}
				}
				if pn == nn && (len(gained) > 0 || len(lost) > 0) {
					t.Fatalf("no change moved %d/%d arcs", len(gained), len(lost))
				}
			}
		}
	}
}
