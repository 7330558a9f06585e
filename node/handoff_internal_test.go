package node

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/ring"
)

// vanishingNet refuses every peer dial, and the first one also drops the
// dialled member's connection from the node's table, as its leave would:
// the member is gone between the first attempt of a push and the next.
type vanishingNet struct {
	n     atomic.Pointer[Node]
	dials atomic.Int32
}

func (v *vanishingNet) DialPeer(_ context.Context, _, to, _ string) (net.Conn, error) {
	if v.dials.Add(1) == 1 {
		t := &v.n.Load().peers
		t.mu.Lock()
		next := map[string]*peerConn{}
		for k, pc := range *t.m.Load() {
			if k != to {
				next[k] = pc
			}
		}
		t.m.Store(&next)
		t.mu.Unlock()
	}
	return nil, errors.New("refused")
}

func (v *vanishingNet) WrapGossip(_ string, t ring.Transport) ring.Transport { return t }

// A push whose target leaves the ring between attempts used to read the
// name of a nil connection after the retry loop and panic, taking the
// service down during a rolling restart. Here the first attempt fails and
// the target is gone before the second: the batch must come back as
// undelivered, be counted as failed, and come back into the local store
// (its target is in no ring), and nothing may panic.
func TestPushBatchTargetGoneBetweenAttempts(t *testing.T) {
	nw := &vanishingNet{}
	n, err := New(Config{Name: "a", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0",
		ForwardTimeout: 10 * time.Millisecond, Network: nw})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	nw.n.Store(n)
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Hour}
	for _, k := range []string{"k1", "k2"} {
		if _, err := n.Allow(context.Background(), k, rule); err != nil {
			t.Fatal(err)
		}
	}
	// A connection to "ghost", a member this node will never see.
	pc := n.peers.dial("ghost", "127.0.0.1:1")
	n.peers.m.Store(&map[string]*peerConn{"ghost": pc})
	defer pc.client.Close()
	defer pc.bulk.Close()

	before := n.stats.handoffFailures.Load()
	left, failed := n.pushBatch("ghost", []string{"k1", "k2"})
	if len(left) != 0 {
		t.Errorf("keys left = %v, want none (the batch holds both)", left)
	}
	if len(failed) != 2 {
		t.Fatalf("undelivered = %d, want both keys", len(failed))
	}
	if d := nw.dials.Load(); d != 1 {
		t.Errorf("%d dials, want 1: the second attempt must find the target gone", d)
	}
	if got := n.stats.handoffFailures.Load() - before; got != 2 {
		t.Errorf("hand-off failures = %d, want 2", got)
	}
	if n.local.Has("k1") {
		t.Fatal("a state given up is still in the local store")
	}
	n.takeBack("ghost", failed)
	for _, k := range []string{"k1", "k2"} {
		if st, ok := n.local.Export(k); !ok || st.B != 1 {
			t.Errorf("%s after the failed push: %+v, %v; want its state back (count 1)", k, st, ok)
		}
	}
}
