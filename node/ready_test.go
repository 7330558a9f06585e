package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// A node alone by configuration is ready at once; a node that joins is
// ready once each member it found has pushed it the keys that moved to it
// (here long before the hand-off window ends), and holds those keys' states
// then; a closed node is not ready.
func TestReady(t *testing.T) {
	// (A window of 3 s: a Done that reaches the new node before it sees the
	// change is not kept, and the node is then ready when the window ends,
	// its pushes long in.)
	c := nodetest.Start(t, 2, func(cfg *node.Config) { cfg.HandoffWindow = 3 * time.Second })
	a := c.Nodes[0]
	if !a.Ready() {
		t.Fatal("a node with no Join addresses is not ready")
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 3, Window: time.Hour}
	var keys []string
	for i := range 200 {
		k := fmt.Sprint("r", i)
		keys = append(keys, k)
		exhaust(t, a, k, rule)
	}
	j := c.Add(t)
	waitFor(t, 10*time.Second, "the new node ready", j.Ready)
	var moved []string
	for _, k := range keys {
		if j.Owner(k) == j.Name() {
			moved = append(moved, k)
		}
	}
	if len(moved) == 0 {
		t.Fatal("no key moved to the new node")
	}
	// Ready means the pushes are in: the moved keys are decided by the new
	// node from their states, with no pull.
	if s := j.Stats(); s.Received < uint64(len(moved)) || s.Pulls != 0 {
		t.Fatalf("ready with %d states received of %d moved, %d pulls", s.Received, len(moved), s.Pulls)
	}
	denied(t, []*node.Node{j}, moved, rule, "once ready")
	j.Close()
	if j.Ready() {
		t.Fatal("a closed node is ready")
	}
}

// Calls that arrive together on a key whose state may be elsewhere share
// one pull: a new owner asks the previous one once, not once per call (the
// core keeps one pull per key: internal/hold's simulator checks it).
func TestConcurrentPullsShareOne(t *testing.T) {
	c := nodetest.Start(t, 1, func(cfg *node.Config) { cfg.HandoffWindow = time.Hour })
	j := c.Add(t)
	// (Not Ready: a Done that reaches j before j sees the change is not
	// kept, and j is then Ready only when the hour's window ends.)
	c.WaitMembers(t, 10*time.Second, c.Nodes...)
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1000, Window: time.Hour}
	keys := keysOwnedBy(j, j.Name(), 4)
	before := j.Stats().Pulls
	start := make(chan struct{})
	done := make(chan error)
	for g := range 64 {
		go func() {
			<-start
			_, err := j.Allow(ctx, keys[g%len(keys)], rule)
			done <- err
		}()
	}
	close(start)
	for range 64 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// (The previous owner's Done usually resolves the change before the
	// calls come, and then nothing is pulled at all.)
	if got := j.Stats().Pulls - before; got > uint64(len(keys)) {
		t.Fatalf("%d pulls for %d keys hit by 64 calls at once; want one per key at most", got, len(keys))
	}
}
