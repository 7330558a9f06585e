package hold

import (
	"testing"

	"github.com/ringlimit/ringlimit/ring"
)

// What Settle resolves and what it leaves open. n1 sees n2, then n3 join
// (two changes: a join right after a join), and nobody's Done comes: both
// wait on members the view has in the incarnations they had, so n1 is
// Idle, and Settle resolves both. A change that waits on a member the view
// no longer has is not settled (it may hold what it held), nor is a node
// with a pull on its way, nor a view other than the current one; a change
// that waits on a member that restarted since is (its predecessor, gone,
// holds nothing).
func TestSettle(t *testing.T) {
	view := func(incs map[string]uint64) (View, View, uint64) {
		var ms, others []string
		for _, m := range []string{"n1", "n2", "n3", "n4"} {
			if _, ok := incs[m]; ok {
				ms = append(ms, m)
				if m != "n1" {
					others = append(others, m)
				}
			}
		}
		v := simView{ring.New(ms, 8), incs}
		return v, simView{ring.New(others, 8), incs}, viewID(v)
	}
	start := func() (*Core, uint64) {
		c := New("n1")
		v, w, id := view(map[string]uint64{"n1": 1})
		c.SetView(v, w, id, 0)
		for i, incs := range []map[string]uint64{
			{"n1": 1, "n2": 1},
			{"n1": 1, "n2": 1, "n3": 1},
		} {
			v, w, id = view(incs)
			c.SetView(v, w, id, int64(1000*(i+1)))
		}
		return c, id
	}

	c, id := start()
	if c.Sources() != 2 || c.Clean() || !c.Idle() {
		t.Fatalf("after two joins: %d changes open, Clean %v, Idle %v; want 2, false, true", c.Sources(), c.Clean(), c.Idle())
	}
	if c.Settle(id + 1) {
		t.Fatal("settled by a view that is not the current one")
	}
	if !c.Settle(id) || c.Sources() != 0 || c.Settles != 2 || c.Resolved != 2 {
		t.Fatalf("Settle: %d changes open, %d settled, %d resolved; want 0, 2, 2", c.Sources(), c.Settles, c.Resolved)
	}

	// A pull on its way: not Idle, nothing settled.
	c, id = start()
	key := "k"
	for c.Owner(ring.Hash(key)) != "n1" {
		key += "k"
	}
	if a := c.Call(Call{Key: key, Hash: ring.Hash(key), Now: 3000}); a.Kind != Pull {
		t.Fatalf("a call on a key gained in the changes: %v, want a pull", a.Kind)
	}
	if c.Idle() || c.Settle(id) || c.Sources() != 2 {
		t.Fatalf("with a pull on its way: Idle %v, %d changes open; want false, 2", c.Idle(), c.Sources())
	}

	// n3 leaves the view: the change that waits on it stays.
	c, _ = start()
	v, w, id := view(map[string]uint64{"n1": 1, "n2": 1})
	c.SetView(v, w, id, 3000)
	if c.Idle() || c.Settle(id) {
		t.Fatalf("with a change waiting on a member the view dropped: Idle %v, settled; want neither", c.Idle())
	}

	// n3 restarted (incarnation 2): its predecessor holds nothing.
	c, _ = start()
	v, w, id = view(map[string]uint64{"n1": 1, "n2": 1, "n3": 2})
	c.SetView(v, w, id, 3000)
	if !c.Idle() || !c.Settle(id) || c.Sources() != 0 {
		t.Fatalf("with n3 restarted: Idle %v, %d changes open; want true, 0", c.Idle(), c.Sources())
	}
}

// Arrivals counts every event that may bring a state: a push that arrived,
// even one refused, moves it.
func TestArrivalsCount(t *testing.T) {
	c := New("n1")
	before := c.Arrivals()
	c.Arrived(Arrival{Key: "k", From: "n2", Inc: 7})
	if c.Arrivals() == before {
		t.Fatal("a push that arrived did not move Arrivals")
	}
}
