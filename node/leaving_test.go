package node_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/ring"
)

// An owner this node cannot reach fails over to the store (here none: the
// fail-open policy), unless it announced its leave: it gave its keys'
// states to their next owners before that, so the call goes to them, and
// this node's view drops it at once. (A leaver closes its port once its
// peers have been quiet for a moment; a caller whose gossip had not yet
// dropped it met the closed port, and a rolling restart without a store
// failed open and admitted 101 of 100.)
func TestUnreachableLeaverIsRoutedPast(t *testing.T) {
	c := nodetest.Start(t, 3, func(cfg *node.Config) { cfg.Gossip = settledGossip })
	c.WaitSettled(t, 10*time.Second)
	a, b, leaver := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Hour}
	// Keys of the leaver's whose next owner is b.
	next := ring.New([]string{a.Name(), b.Name()}, ring.DefaultVirtualNodes)
	var keys []string
	for _, k := range keysOwnedBy(a, leaver.Name(), 200) {
		if next.Owner(k) == b.Name() && b.Owner(k) == leaver.Name() {
			keys = append(keys, k)
		}
	}
	if len(keys) < 2 {
		t.Fatalf("only %d keys of %s's go to %s next", len(keys), leaver.Name(), b.Name())
	}
	c.Network.Drop(a.Name(), leaver.Name())
	// Not leaving: unreachable, so the policy decides.
	if d, err := a.Allow(ctx, keys[0], rule); err != nil || d.Source != ringlimit.Fallback {
		t.Fatalf("an unreachable owner that is not leaving: %+v, %v; want the policy's decision", d, err)
	}
	// b has had news of the leave and dropped the leaver; a has its
	// intent only, and still routes the key there.
	node.DropLeaver(b, leaver.Name())
	node.SayLeaving(a, leaver.Name())
	if got := a.Owner(keys[1]); got != leaver.Name() {
		t.Fatalf("%s routes the key to %s before the call, want %s", a.Name(), got, leaver.Name())
	}
	for i := range 3 {
		d, err := a.Allow(ctx, keys[1], rule)
		if err != nil || d.Source != ringlimit.Peer || !d.Allowed || d.Remaining != rule.Limit-1-int64(i) {
			t.Fatalf("call %d to an unreachable owner that announced its leave: %+v, %v; want %s to decide it, %d left",
				i, d, err, b.Name(), rule.Limit-1-int64(i))
		}
	}
	if got := a.Owner(keys[1]); got != b.Name() {
		t.Fatalf("%s routes the key to %s, want %s: its view keeps the leaver", a.Name(), got, b.Name())
	}
}
