package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/ring"
)

// A call routed by a view that went stale while it was paused does not
// start its key afresh here. The sequence, read from a CI run of
// TestRollingRestartUnderLoad (two leaky buckets admitted 101 of 100, no
// fail-open decision):
//
//  1. A call reads this node's ring: the key is this node's. The node
//     holds no state of it, and no key changes hands here.
//  2. The call is paused before the local store's lock. Meanwhile a member
//     joins that owns the key in the new view. This node held no state for
//     the keys it lost, so it says Done at once, the newcomer starts the
//     key without asking it, and decides hits on it.
//  3. The call resumes. The state is not here and no key changes hands,
//     so the owned path started the key afresh, by a ring that no longer
//     gave it the key: two states of one key, one hit each over its limit.
//
// The fast path now checks, under the key's lock, that the view it routed
// by is still the core's (owner.freshSince). This test is the pause: it
// holds the generation and ring a call read at 1, and makes the owned
// path's decision after 2.
func TestOwnedPathDoesNotStartAKeyByAStaleView(t *testing.T) {
	clk := testclock.New(time.UnixMilli(1_800_000_000_000))
	secret := []byte("staleview-secret-0123456789abcde")
	start := func(name string, join ...string) *Node {
		t.Helper()
		n, err := New(Config{Name: name, GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0", Join: join,
			SecretKey: secret, Gossip: GossipFast, Clock: clk, ForwardTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	ctx := context.Background()
	n1 := start("n1")
	key := ""
	both := ring.New([]string{"n1", "n2"}, n1.own.view.Load().VirtualNodes())
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); both.Owner(k) == "n2" {
			key = k
		}
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 3, Window: time.Hour}

	// 1. The call reads the generation, then the ring: the key is n1's.
	h := ring.Hash(key)
	g := n1.own.gen.Load()
	if at := n1.own.view.Load().OwnerOfHash(h); at != "n1" && at != "" { // ("": no ring yet, the key is n1's, as in call)
		t.Fatalf("n1's ring gives %q to %q", key, at)
	}

	// 2. n2 joins, the change resolves, and n2 uses up the key.
	n2 := start("n2", n1.GossipAddr())
	deadline := time.Now().Add(20 * time.Second)
	for !(len(n1.Members()) == 2 && len(n2.Members()) == 2 && n1.own.fresh() && n2.own.fresh()) {
		if time.Now().After(deadline) {
			t.Fatalf("the join did not settle: n1 sees %v (fresh %v), n2 sees %v (fresh %v)",
				n1.Members(), n1.own.fresh(), n2.Members(), n2.own.fresh())
		}
		time.Sleep(5 * time.Millisecond) // polling, with a deadline
	}
	for i := range 3 {
		if d, err := n2.AllowN(ctx, key, rule, 1); err != nil || !d.Allowed || d.Source != ringlimit.Local {
			t.Fatalf("hit %d at n2: %+v, %v", i+1, d, err)
		}
	}

	// 3. The paused call resumes on the owned path.
	var d ringlimit.Decision
	_, done, err := n1.owned(&d, nil, clk.Now(), h, &peer.Request{Op: peer.OpAllow, Key: key, Rule: rule, N: 1}, g)
	if done || err != nil || n1.local.Has(key) {
		t.Fatalf("the owned path, by the stale view: decided %v (%+v, %v), n1 holds the key: %v; want nothing decided here", done, d, err, n1.local.Has(key))
	}
	// The call goes on down the chain (call: not done), to n2: denied.
	if d, err := n1.AllowN(ctx, key, rule, 1); err != nil || d.Allowed {
		t.Fatalf("a fourth hit through n1: %+v, %v; want denied (limit 3)", d, err)
	}
	// With the generation it read now, the owned path of a key n1 owns
	// may start it: the check does not shut the fast path for good.
	mine := ""
	for i := 0; mine == ""; i++ {
		if k := fmt.Sprintf("m%d", i); both.Owner(k) == "n1" {
			mine = k
		}
	}
	if _, done, err := n1.owned(&d, nil, clk.Now(), ring.Hash(mine), &peer.Request{Op: peer.OpAllow, Key: mine, Rule: rule, N: 1}, n1.own.gen.Load()); !done || err != nil || !d.Allowed {
		t.Fatalf("a key n1 owns, by the current view: decided %v (%+v, %v); want started here", done, d, err)
	}
}
