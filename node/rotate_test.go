package node_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// TestSecretRotation rotates a 3-node cluster's secret without stopping
// it: every node is restarted, one by one, through the three steps that
// node.Config.SecretKeys documents, and after each restart every node's
// calls on keys that each other node owns are forwarded and decided there
// (within 10 s: a forward may time out on a loaded machine, and is tried
// again on a new key).
// Gossip too works at every step: each restarted node joins the others.
func TestSecretRotation(t *testing.T) {
	old, next := nodetest.Secret(), []byte("rotated-secret-fedcba9876543210!")
	steps := []struct {
		send   []byte
		accept [][]byte
	}{
		{old, [][]byte{next}}, // 1: send old, accept new too
		{next, [][]byte{old}}, // 2: send new, accept old too
		{next, nil},           // 3: new alone
	}
	step := -1 // before the rotation: old alone
	c := nodetest.Start(t, 3, func(cfg *node.Config) {
		if step >= 0 {
			cfg.SecretKey, cfg.SecretKeys = steps[step].send, steps[step].accept
		}
	})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Minute}
	round := 0
	forwardAll := func(when string) {
		t.Helper()
		round++
		for _, a := range c.Nodes {
			for _, b := range c.Nodes {
				if a == b {
					continue
				}
				// A node that refuses the other's secret never lets a call
				// through; a call that times out on a loaded machine does
				// on a later try.
				deadline := time.Now().Add(10 * time.Second)
				for try := 0; ; try++ {
					k := keyOwnedBy(a, b.Name(), fmt.Sprintf("r%d-%d-", round, try))
					d, err := a.Allow(context.Background(), k, rule)
					if err == nil && d.Allowed && d.Source == ringlimit.Peer {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: %s's calls on %s's keys for 10s, the last: %+v, %v; want allowed by the peer", when, a.Name(), b.Name(), d, err)
					}
					time.Sleep(10 * time.Millisecond) // polling, with a deadline
				}
			}
		}
	}
	forwardAll("before the rotation")
	for s := range steps {
		step = s
		for i := range c.Nodes {
			nd := c.Restart(t, i)
			forwardAll(fmt.Sprintf("step %d, %s restarted", s+1, nd.Name()))
		}
	}
}

// keyOwnedBy returns a key with prefix that owner owns in nd's view.
func keyOwnedBy(nd *node.Node, owner, prefix string) string {
	for i := 0; ; i++ {
		if k := fmt.Sprint(prefix, i); nd.Owner(k) == owner {
			return k
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSecretRotationRefusesOthers: a node in the middle of a rotation
// accepts the old and the new secret, and nothing else: a node whose only
// secret is neither cannot join (its join fails in New), and the others'
// membership stays theirs.
func TestSecretRotationRefusesOthers(t *testing.T) {
	next := []byte("rotated-secret-fedcba9876543210!")
	c := nodetest.Start(t, 3, func(cfg *node.Config) { cfg.SecretKeys = [][]byte{next} })
	var logs syncBuffer
	intruder, err := node.New(node.Config{
		Name:       "intruder",
		GossipAddr: "127.0.0.1:0",
		RPCAddr:    "127.0.0.1:0",
		Join:       []string{c.Nodes[0].GossipAddr()},
		SecretKey:  []byte("unknown-secret-0"),
		Gossip:     node.GossipFast,
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	if !strings.Contains(logs.String(), "join failed") {
		t.Errorf("a node with an unknown secret joined; its log:\n%s", logs.String())
	}
	if got := intruder.Members(); !slices.Equal(got, []string{"intruder"}) {
		t.Errorf("the intruder sees %v", got)
	}
	for _, nd := range c.Nodes {
		if slices.Contains(nd.Members(), "intruder") {
			t.Errorf("%s sees the intruder: %v", nd.Name(), nd.Members())
		}
	}
}

func TestSecretKeysConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  node.Config
	}{
		{"accepted keys without a secret", node.Config{SecretKeys: [][]byte{[]byte("0123456789abcdef")}}},
		{"an accepted key of 15 bytes", node.Config{SecretKey: []byte("0123456789abcdef"), SecretKeys: [][]byte{[]byte("0123456789abcde")}}},
		{"an empty accepted key", node.Config{SecretKey: []byte("0123456789abcdef"), SecretKeys: [][]byte{nil}}},
	} {
		tc.cfg.Name, tc.cfg.GossipAddr, tc.cfg.RPCAddr = "n", "127.0.0.1:0", "127.0.0.1:0"
		nd, err := node.New(tc.cfg)
		if err == nil {
			nd.Close()
			t.Errorf("%s: New accepted it", tc.name)
		} else if !strings.Contains(err.Error(), "SecretKeys") {
			t.Errorf("%s: %v does not name SecretKeys", tc.name, err)
		}
	}
}
