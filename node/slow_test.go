package node_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// An owner that turns slow but answers (60 ms of injected latency on the
// link, more than the 50 ms that used to be the fixed timeout) is waited
// for: the forward timeout came down from the ceiling to its floor (half
// of it) on fast answers, which leaves the slow answers room; its breaker
// stays closed, and every call is decided by the owner, none by the store.
func TestSlowOwnerIsWaitedFor(t *testing.T) {
	store := &sharedStore{l: local.New(local.Config{})}
	const ceiling = 400 * time.Millisecond
	var logs lockedBuffer // the nodes' Info log: a ring change is said there
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.Store = store
		cfg.ForwardTimeout = ceiling
		cfg.HandoffWindow = time.Millisecond
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)).With("node", cfg.Name)
	})
	c.WaitSettled(t, 10*time.Second)
	a, b := c.Nodes[0], c.Nodes[1]
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1000, Window: time.Hour}
	key := keysOwnedBy(a, b.Name(), 1)[0]
	for range 20 { // fast answers: the timeout comes down from the ceiling
		if d, err := a.Allow(ctx, key, rule); err != nil || d.Source != ringlimit.Peer {
			st := a.Stats()
			t.Fatalf("warming: %+v, %v; %s now sees %v, owner %s, changing %v, breaker %s, lag %v; the nodes' log:\n%s",
				d, err, a.Name(), a.Members(), a.Owner(key), st.Changing, st.Peers[b.Name()], st.Lag, logs.String())
		}
	}
	// The floor plus the lag of this process (all nodes run in it), below
	// the ceiling unless the machine stalls it for 200 ms at a stretch.
	if st := a.Stats(); st.Lag < ceiling/2 && st.PeerTimeouts[b.Name()] >= ceiling {
		t.Fatalf("after 20 fast answers the timeout to %s is %v (lag %v), want below the %v ceiling", b.Name(), st.PeerTimeouts[b.Name()], st.Lag, ceiling)
	}
	// The latency applies to connections dialled from now on: close the
	// one in use (the next call dials again: two slow reads, 120 ms).
	c.Network.Drop(a.Name(), b.Name())
	c.Network.Heal()
	c.Network.Delay(a.Name(), b.Name(), 60*time.Millisecond)
	var sources [4]int
	for range 8 {
		d, err := a.Allow(ctx, key, rule)
		if err != nil {
			t.Fatal(err)
		}
		sources[d.Source]++
	}
	st := a.Stats()
	t.Logf("slow owner: local/peer/store/fallback %v; timeout %v, lag %v, breaker %s",
		sources, st.PeerTimeouts[b.Name()], st.Lag, st.Peers[b.Name()])
	// The first call after the drop may find the closed connection (one
	// call to the store); every other waits for the slow owner.
	if sources[ringlimit.Store] > 1 || sources[ringlimit.Peer] < 7 {
		t.Fatalf("decisions by source %v: want the owner to decide every call", sources)
	}
	if s := st.Peers[b.Name()]; s != failover.StateClosed {
		t.Fatalf("the slow owner's breaker is %s, want closed", s)
	}
}
