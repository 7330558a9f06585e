package node_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// Nodes that join by a name: while it resolves to nothing they are alone
// and not Ready; once it resolves to their addresses they form a cluster
// and become Ready, with no restart.
func TestJoinByName(t *testing.T) {
	var mu sync.Mutex
	var addrs []string
	calls := 0
	resolve := func(_ context.Context, name string) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if name != "ringlimit-gossip.test" {
			t.Errorf("resolved %q", name)
		}
		calls++
		return addrs, nil
	}
	var nodes []*node.Node
	for _, name := range []string{"a", "b", "c"} {
		nd, err := node.New(node.Config{
			Name:       name,
			GossipAddr: "127.0.0.1:0",
			RPCAddr:    "127.0.0.1:0",
			Join:       []string{"ringlimit-gossip.test:7946"},
			Resolve:    resolve,
			SecretKey:  nodetest.Secret(),
			Gossip:     node.GossipFast,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer nd.Close()
		nodes = append(nodes, nd)
	}
	waitFor(t, 10*time.Second, "a few resolutions to nothing", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls >= 2*len(nodes)
	})
	for _, nd := range nodes {
		if len(nd.Members()) != 1 || nd.Ready() {
			t.Fatalf("%s: members %v, ready %v while the name resolves to nothing", nd.Name(), nd.Members(), nd.Ready())
		}
	}
	mu.Lock()
	for _, nd := range nodes {
		addrs = append(addrs, nd.GossipAddr())
	}
	mu.Unlock()
	waitFor(t, 10*time.Second, "the cluster to form from the name", func() bool {
		for _, nd := range nodes {
			if len(nd.Members()) != len(nodes) || !nd.Ready() {
				return false
			}
		}
		return true
	})
}

// A node without Join is alone by design: ready at once; closed, not ready.
func TestReadyAlone(t *testing.T) {
	nd, err := node.New(node.Config{Name: "solo", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0", Gossip: node.GossipFast})
	if err != nil {
		t.Fatal(err)
	}
	if !nd.Ready() {
		t.Fatal("a node configured alone is not ready")
	}
	nd.Close()
	if nd.Ready() {
		t.Fatal("a closed node is ready")
	}
}
