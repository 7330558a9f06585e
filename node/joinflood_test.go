package node_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/ring"
)

// sourceNet dials each node's peers from that node's own loopback address,
// as a node on its own host would: Linux routes all of 127/8 to lo.
type sourceNet map[string]net.IP

func (s sourceNet) DialPeer(ctx context.Context, from, _, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: s[from]}}
	return d.DialContext(ctx, "tcp", addr)
}

func (sourceNet) WrapGossip(_ string, t ring.Transport) ring.Transport { return t }

// handshakeFlood keeps an address's connections in the handshake of addr:
// holders goroutines, each dialling from its share of addrs in turn, hold
// every connection the server greets until the server gives it up (its
// handshake timeout) and dial again at once; a refused dial waits 20 ms.
// So at most holders connections are open at once, and the refusals cost
// at most 50 dials a second a holder. stop ends it and waits.
func handshakeFlood(t *testing.T, addr string, from []net.IP, holders int) (stop func()) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		open = map[net.Conn]bool{}
		done = make(chan struct{})
	)
	for h := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := h; ; i += holders {
				select {
				case <-done:
					return
				default:
				}
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from[i%len(from)]}, Timeout: time.Second}
				nc, err := d.Dial("tcp", addr)
				if err == nil {
					mu.Lock()
					open[nc] = true
					mu.Unlock()
					nc.SetReadDeadline(time.Now().Add(10 * time.Second))
					n, _ := io.Copy(io.Discard, nc) // until the server closes
					mu.Lock()
					delete(open, nc)
					mu.Unlock()
					nc.Close()
					if n > 0 {
						continue // held, and given up: dial again at once
					}
				}
				select { // refused
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	return func() {
		close(done)
		mu.Lock()
		for nc := range open {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// A member that joins while half-open handshakes from 4, 64 or 1,000 other
// loopback addresses keep a node's handshake slots full still connects to
// it, and its calls are decided by their owner: a quarter of the slots is
// kept for the addresses gossip knows (issue 28: before, with a flood from
// a few hundred addresses, the joining node made 0 connections in 6 s and
// every call fell back). The flood holds at most 64 connections, and each
// case lasts until the member's first forwarded decision (at most 10 s).
func TestMemberJoinsThroughHandshakeFlood(t *testing.T) {
	for _, addrs := range []int{4, 64, 1000} {
		t.Run(fmt.Sprint(addrs, " addresses"), func(t *testing.T) {
			nw := sourceNet{"a": net.IPv4(127, 0, 0, 1), "b": net.IPv4(127, 0, 0, 2)}
			start := func(name string, join ...string) *node.Node {
				ip := nw[name].String()
				nd, err := node.New(node.Config{Name: name, GossipAddr: ip + ":0", RPCAddr: ip + ":0", Join: join,
					SecretKey: nodetest.Secret(), Gossip: node.GossipFast, Network: nw, ForwardTimeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { nd.Close() })
				return nd
			}
			a := start("a")
			var from []net.IP
			for i := range addrs {
				from = append(from, net.IPv4(127, 0, byte(1+i/250), byte(1+i%250))) // 127.0.1.1 to 127.0.4.250
			}
			stop := handshakeFlood(t, a.RPCAddr(), from, min(64, 8*addrs))
			defer stop()
			const slots, kept = 32, 8
			waitFor(t, 10*time.Second, "the flood filling the handshake slots", func() bool { return a.Stats().Peer.Handshakes >= slots-kept })

			b := start("b", a.GossipAddr())
			keys := keysOwnedBy(b, "a", 1)
			rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
			joined, refusedBefore := time.Now(), a.Stats().Peer.RefusedHandshake
			var d ringlimit.Decision
			maxHS := int64(0)
			for d.Source != ringlimit.Peer {
				if time.Since(joined) > 10*time.Second {
					t.Fatalf("b made no forwarded decision in 10 s through the flood: %+v; a: %+v", d, a.Stats().Peer)
				}
				var err error
				if d, err = b.Allow(ctx, keys[0], rule); err != nil {
					t.Fatal(err)
				}
				maxHS = max(maxHS, a.Stats().Peer.Handshakes)
				time.Sleep(10 * time.Millisecond) // polling, with a deadline
			}
			st := a.Stats().Peer
			t.Logf("%d flooding addresses: b's first forwarded decision %s after it joined; a refused %d in the handshake meanwhile, at most %d in it",
				addrs, time.Since(joined).Round(time.Millisecond), st.RefusedHandshake-refusedBefore, maxHS)
			if maxHS > slots || maxHS < slots-kept {
				t.Fatalf("at most %d connections in the handshake while b joined, want the flood's %d to %d", maxHS, slots-kept, slots)
			}
			if st.Conns < 1 {
				t.Fatalf("a holds no connection from b: %+v", st)
			}
		})
	}
}
