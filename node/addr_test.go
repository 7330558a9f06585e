package node_test

import (
	"net"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// A peer listener bound to every interface is reached at the host its node
// gossips from, and the call is served by the owner, not by the caller's own
// server.
func TestRPCBoundToEveryInterface(t *testing.T) {
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.RPCAddr = "0.0.0.0:0"
		if cfg.Name == "n2" {
			cfg.GossipAddr = "127.0.0.2:0" // another host, as far as n1 can tell
		}
	})
	a, b := c.Nodes[0], c.Nodes[1]
	key := keysOwnedBy(a, b.Name(), 1)[0]
	rule := ringlimit.Rule{Limit: 10, Window: time.Minute}
	for range 3 {
		d, err := a.Allow(ctx, key, rule)
		if err != nil || d.Source != ringlimit.Peer {
			t.Fatalf("%+v, %v", d, err)
		}
	}
	_, port, _ := net.SplitHostPort(b.RPCAddr())
	if got, want := c.Network.Dialed(a.Name(), b.Name()), net.JoinHostPort("127.0.0.2", port); got != want {
		t.Fatalf("n1 dialled n2 at %q, want %q (n2's gossip host)", got, want)
	}
	if sa, sb := a.Stats().Served, b.Stats().Served; sa != 0 || sb != 3 {
		t.Fatalf("served: caller %d, owner %d; want 0 and 3", sa, sb)
	}
}
