package node_test

import (
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

func openFDs(t *testing.T) int {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	return len(fds)
}

// A flood of raw connections and half-open handshakes at an owner's peer
// listener does not disturb a caller that forwards to it: every call is
// decided by the owner (Source Peer, no store, no fallback), p99 stays
// within the forward timeout, and the owner's goroutines and file
// descriptors stay bounded by its caps, not by the flood.
func TestPeerFloodKeepsForwarding(t *testing.T) {
	const forwardTimeout = time.Second
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.ForwardTimeout = forwardTimeout
		cfg.MaxPeerConns = 16
		cfg.LeaseHot = -1 // every call forwarded: its token bucket, far under its limit, would lease
	})
	a, o := c.Nodes[0], c.Nodes[1]
	keys := keysOwnedBy(a, o.Name(), 64)
	rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	awaitPeerDecision(t, a, keys[0])
	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)

	const halfOpen, rawPerRound, rounds = 300, 50, 40
	var (
		wg          sync.WaitGroup
		done        = make(chan struct{})
		maxG, maxFD int
		lat         []time.Duration
		bad         []ringlimit.Decision
	)
	wg.Add(1)
	go func() { // the legitimate caller
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				if i >= 200 {
					return
				}
			default:
			}
			start := time.Now()
			d, err := a.Allow(ctx, keys[i%len(keys)], rule)
			lat = append(lat, time.Since(start))
			if err != nil || d.Source != ringlimit.Peer {
				bad = append(bad, d)
			}
		}
	}()

	addr := o.RPCAddr()
	// The flood comes from other addresses than the nodes' (127.0.0.1), as
	// it would from another host: one address gets a quarter of the
	// handshake slots, so a peer whose connection drops (a gossip flap on
	// a loaded machine) can dial again.
	halfOpenFrom := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	rawFrom := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
	var held []net.Conn // half-open: connected, never answering the greeting
	for range rounds {
		for range halfOpen / rounds {
			if nc, err := halfOpenFrom.Dial("tcp", addr); err == nil {
				held = append(held, nc)
			}
		}
		var raw []net.Conn
		for range rawPerRound {
			if nc, err := rawFrom.Dial("tcp", addr); err == nil {
				raw = append(raw, nc)
			}
		}
		maxG, maxFD = max(maxG, runtime.NumGoroutine()), max(maxFD, openFDs(t))
		for _, nc := range raw {
			nc.Close()
		}
		runtime.Gosched()
	}
	close(done)
	wg.Wait()
	for _, nc := range held {
		nc.Close()
	}

	st, so := a.Stats(), o.Stats()
	t.Logf("%d calls; owner: %+v; goroutines %d → max %d, fds %d → max %d (held %d)",
		len(lat), so.Peer, baseG, maxG, baseFD, maxFD, len(held))
	if len(bad) > 0 {
		t.Fatalf("%d of %d calls not decided by the owner, first %+v", len(bad), len(lat), bad[0])
	}
	if st.ForwardFailures != 0 || st.Decisions[ringlimit.Store] != 0 || st.Decisions[ringlimit.Fallback] != 0 {
		t.Fatalf("calls left the owner: %+v", st)
	}
	slices.Sort(lat)
	if p99 := lat[len(lat)*99/100]; p99 >= forwardTimeout {
		t.Fatalf("p99 %s, over the forward timeout %s", p99, forwardTimeout)
	}
	if so.Peer.RefusedHandshake == 0 {
		t.Fatalf("nothing refused over the handshake cap: %+v", so.Peer)
	}
	// The owner holds at most its handshake cap of the flood's
	// connections, each with one goroutine; the test holds its own ends.
	const handshakeCap, slack = 32, 40
	if maxG > baseG+handshakeCap+slack {
		t.Fatalf("goroutines %d → %d: more than the handshake cap", baseG, maxG)
	}
	if maxFD > baseFD+len(held)+rawPerRound+handshakeCap+slack {
		t.Fatalf("fds %d → %d with %d held and %d raw: the owner keeps more than its caps", baseFD, maxFD, len(held), rawPerRound)
	}
}
