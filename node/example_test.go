package node_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
)

func Example() {
	secret := []byte("0123456789abcdef0123456789abcdef") // 32 bytes: share it with every node
	first, err := node.New(node.Config{
		Name:       "api-1",
		GossipAddr: "127.0.0.1:0",
		RPCAddr:    "127.0.0.1:0",
		SecretKey:  secret,
		Gossip:     node.GossipFast,
		// Generous for a busy test machine; the default is 50 ms.
		ForwardTimeout: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer first.Close()
	second, err := node.New(node.Config{
		Name:           "api-2",
		GossipAddr:     "127.0.0.1:0",
		RPCAddr:        "127.0.0.1:0",
		Join:           []string{first.GossipAddr()},
		SecretKey:      secret,
		Gossip:         node.GossipFast,
		ForwardTimeout: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer second.Close()
	for deadline := time.Now().Add(10 * time.Second); len(second.Members()) < 2 || len(first.Members()) < 2; {
		if time.Now().After(deadline) {
			log.Fatal("the two nodes did not see each other")
		}
		time.Sleep(10 * time.Millisecond) // wait for the gossip to converge
	}

	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 2, Window: time.Hour}
	ctx := context.Background()
	// Either node gives the same answers: the key's owner decides.
	for _, n := range []*node.Node{first, second, first} {
		d, err := n.Allow(ctx, "user:42", rule)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("allowed:", d.Allowed, "remaining:", d.Remaining)
	}
	// Output:
	// allowed: true remaining: 1
	// allowed: true remaining: 0
	// allowed: false remaining: 0
}
