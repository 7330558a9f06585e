package node_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// A state that arrives at a member that does not own its key (a push from
// a member whose ring was not this one's) is a stray: the next ring change
// sends it to the key's owner, though the change takes none of this
// member's arcs that hold the key. (A push that visited only the arcs lost
// left it behind for good: a second holder of the key once the ring sent
// calls back to this member.)
func TestStrayStateFollowsItsKey(t *testing.T) {
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.Clock = clk
		cfg.HandoffWindow = 20 * time.Millisecond
	})
	a, b := c.Nodes[0], c.Nodes[1]
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Hour}
	key := keysOwnedBy(a, b.Name(), 1)[0]
	// The key's state, its limit used up, as another member held it.
	src := memstore.New(memstore.Config{Clock: clk})
	for range rule.Limit {
		if d, err := src.AllowN(ctx, key, rule, 1); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	st, ok := src.Export(key)
	if !ok {
		t.Fatal("no state to install")
	}
	node.Install(a, key, st)
	if !node.Holds(a, key) {
		t.Fatal("the stray state was not installed")
	}
	j := c.Add(t)
	owner := map[string]*node.Node{b.Name(): b, j.Name(): j}[j.Owner(key)]
	if owner == nil {
		t.Fatalf("the key's owner is %s", j.Owner(key))
	}
	waitFor(t, 10*time.Second, "the stray state at its owner", func() bool {
		return !node.Holds(a, key) && node.Holds(owner, key)
	})
	denied(t, c.Nodes, []string{key}, rule, "after the stray state moved")
}
