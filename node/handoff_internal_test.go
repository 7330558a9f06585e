package node

import (
	"net"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/local"
)

// A push whose target leaves the ring between attempts used to read the
// name of a nil connection after the retry loop and panic, taking the
// service down during a rolling restart. Here the first attempt fails (the
// address refuses connections) and the retry finds no member of that name:
// the batch must be undone, counted as failed, and nothing may panic.
func TestPushBatchTargetGoneBetweenAttempts(t *testing.T) {
	n, err := New(Config{Name: "a", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0", ForwardTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused

	pc := n.peers.dial("ghost", dead) // "ghost" is no member: peers.get returns nil
	defer pc.client.Close()
	defer pc.bulk.Close()

	var undone []string
	take := func(key string) (local.State, bool) {
		return local.State{Algorithm: 1, Window: 1000, Until: n.nowMs() + 60_000}, true
	}
	undo := func(key string, _ local.State, ok bool) {
		if !ok {
			t.Errorf("undo(%q) without the state that was taken", key)
		}
		undone = append(undone, key)
	}
	before := n.stats.handoffFailures.Load()
	left := n.pushBatch(pc, []string{"k1", "k2"}, take, undo)
	if len(left) != 0 {
		t.Errorf("keys left = %v, want none (the batch holds both)", left)
	}
	if len(undone) != 2 {
		t.Errorf("undone = %v, want both keys back", undone)
	}
	if got := n.stats.handoffFailures.Load() - before; got != 2 {
		t.Errorf("hand-off failures = %d, want 2", got)
	}
}
