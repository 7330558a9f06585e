package hold

import (
	"testing"

	"github.com/ringlimit/ringlimit/ring"
)

// A Done of this node's current view still speaks for the older changes
// when the view's own change was resolved first, by the other members'
// Done. In a rolling restart that is the common order: n1 restarts, the
// survivors' Done for the new view come before the new n1's, and n1's Done
// is the one the change of n1's leave waits on. Dropped, that change stayed
// open for good, n2 was never Clean again and said no more Done, and so
// nobody was (0 of 6 four-node rolling restarts in node resolved their
// changes; 6 of 6 now).
func TestDoneOfViewWhoseChangeResolvedFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bugs    bug
		settled bool
	}{
		{"core", 0, true},
		{"with the Done dropped (the bug)", bugDoneLost, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view := func(incs map[string]uint64) (View, View, uint64) {
				var ms, others []string
				for _, m := range []string{"n1", "n2", "n3", "n4"} {
					if _, ok := incs[m]; ok {
						ms = append(ms, m)
						if m != "n2" {
							others = append(others, m)
						}
					}
				}
				v := simView{ring.New(ms, 8), incs}
				return v, simView{ring.New(others, 8), incs}, viewID(v)
			}
			c := New("n2")
			c.setBugs(tc.bugs)
			done := func(from string, id uint64) {
				t.Helper()
				if _, known := c.Done(from, id); !known && id != c.ViewID() {
					t.Fatalf("Done from %s of view %d: not known", from, id)
				}
			}
			// n2 joins n1, n3, n4, and they say Done.
			v0, w0, id0 := view(map[string]uint64{"n1": 1, "n2": 1, "n3": 1, "n4": 1})
			c.SetView(v0, w0, id0, 1000)
			for _, m := range []string{"n1", "n3", "n4"} {
				done(m, id0)
			}
			if !c.Settled() {
				t.Fatalf("after the join and every Done: %d changes open", c.Sources())
			}
			// n1 leaves: n3 and n4 say Done; the change waits on n1.
			v1, w1, id1 := view(map[string]uint64{"n2": 1, "n3": 1, "n4": 1})
			c.SetView(v1, w1, id1, 2000)
			done("n3", id1)
			done("n4", id1)
			// n1 is back (incarnation 2): n3's and n4's Done resolve the
			// new view's change, before n1's Done comes.
			v2, w2, id2 := view(map[string]uint64{"n1": 2, "n2": 1, "n3": 1, "n4": 1})
			c.SetView(v2, w2, id2, 3000)
			done("n3", id2)
			done("n4", id2)
			c.Done("n1", id2)
			if got := c.Settled() && c.Clean(); got != tc.settled {
				t.Errorf("after every member's Done of the view: settled %v (%d changes open, Clean %v); want %v", got, c.Sources(), c.Clean(), tc.settled)
			}
		})
	}
}
