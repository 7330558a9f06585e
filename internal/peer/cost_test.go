package peer

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// quietCost opens n sealed client connections to one server, makes a call
// on each, waits until the server's connections have dropped their buffers
// and workers, and returns the heap and stack bytes per connection pair
// (both ends: what a quiet peer costs a node that calls it and is called
// by it).
func quietCost(t testing.TB, n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: &truthHandler{}, IdleTimeout: 4 * time.Second})
	defer s.Close()
	clients := make([]*Client, n)
	for i := range clients {
		clients[i] = NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 5 * time.Second})
		defer clients[i].Close()
		// A large state makes the buffers grow first.
		r := Request{Op: OpStates, States: []Item{{Key: fmt.Sprint(i), Value: make([]byte, 32<<10)}}}
		if _, err := clients[i].Do(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
		if _, err := clients[i].Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// Quiet: one reader per client and per server connection, the
	// server's accept and log loops, nothing else.
	waitFor(t, func() bool { return runtime.NumGoroutine() <= g0+2*n+2 })
	// Each server connection drops its buffers after an idle step; each
	// client its write buffers after one (both 1 s).
	waitFor(t, func() bool { return s.idleDrops.Load() >= uint64(n) })
	for _, c := range clients {
		waitFor(t, func() bool { return c.quietFor() > 0 })
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	used := func(m *runtime.MemStats) float64 { return float64(m.HeapInuse + m.StackInuse) }
	if s.Stats().Conns != int64(n) {
		t.Fatalf("%d connections open, want %d", s.Stats().Conns, n)
	}
	t.Logf("heap %.1f KiB, stacks %.1f KiB per pair", float64(after.HeapInuse-before.HeapInuse)/float64(n)/1024, float64(after.StackInuse-before.StackInuse)/float64(n)/1024)
	return (used(&after) - used(&before)) / float64(n)
}

// An open but quiet peer connection costs at most 32 KiB, both ends
// together, after carrying a large frame (checked without the race
// detector, which grows stacks).
func TestQuietConnectionCost(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the idle step")
	}
	per := quietCost(t, 64)
	t.Logf("a quiet connection pair: %.1f KiB", per/1024)
	if raceEnabled {
		return // the race detector's stacks and shadow heap are not what a node pays
	}
	if per > 32<<10 {
		t.Fatalf("a quiet connection pair costs %.1f KiB, want ≤ 32 KiB", per/1024)
	}
}

// TestQuietMeshCost shows what a quiet peer costs at 2, 8 and 16 nodes: n
// servers, each called by the other n-1 over sealed connections (a full
// mesh, as a cluster's forwarding makes), after every connection carried a
// 32 KiB state and then stayed quiet. Per node and peer: one client end
// and one server end, beyond the servers' own fixed cost. Small meshes are
// repeated to measure at least 64 peers. Without memberlist and the node's
// breakers, whose background churn is larger than what is measured.
func TestQuietMeshCost(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the idle step")
	}
	for _, n := range []int{2, 8, 16} {
		copies := (64 + n*(n-1) - 1) / (n * (n - 1))
		pairs := copies * n * (n - 1)
		servers := make([]*Server, copies*n)
		for i := range servers {
			servers[i] = Serve(listen(t), ServerConfig{Secret: secret, Handler: &truthHandler{}, IdleTimeout: 4 * time.Second})
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var clients []*Client
		for m := range copies {
			mesh := servers[m*n : (m+1)*n]
			for i := range mesh {
				for j := range mesh {
					if i == j {
						continue
					}
					c := NewClient(ClientConfig{Addr: mesh[j].Addr().String(), Secret: secret, Timeout: 5 * time.Second})
					clients = append(clients, c)
					r := Request{Op: OpStates, States: []Item{{Key: fmt.Sprint(i), Value: make([]byte, 32<<10)}}}
					if _, err := c.Do(context.Background(), &r); err != nil {
						t.Fatal(err)
					}
					if _, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		waitFor(t, func() bool {
			drops := uint64(0)
			for _, s := range servers {
				drops += s.idleDrops.Load()
			}
			return drops >= uint64(pairs)
		})
		for _, c := range clients {
			waitFor(t, func() bool { return c.quietFor() > 0 })
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := float64(int64(after.HeapInuse+after.StackInuse)-int64(before.HeapInuse+before.StackInuse)) / float64(pairs)
		t.Logf("%2d nodes: a quiet peer costs %.1f KiB (heap and stacks, both ends; %d peers measured)", n, per/1024, pairs)
		for _, c := range clients {
			c.Close()
		}
		for _, s := range servers {
			s.Close()
		}
		if !raceEnabled && per > 32<<10 {
			t.Errorf("%d nodes: a quiet peer costs %.1f KiB, want ≤ 32 KiB", n, per/1024)
		}
	}
}

var _ = ringlimit.Peer
