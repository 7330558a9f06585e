package node

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// steppingClock is a leaseClock whose wall clock the test steps back while
// its monotonic clock goes on.
type steppingClock struct {
	wall time.Time
	mono int64
}

func (c *steppingClock) Wall() time.Time { return c.wall }
func (c *steppingClock) Mono() int64     { return c.mono }

// A lease lives its life on the monotonic clock: the borrower's wall
// clock stepping back an hour, twice, does not keep it alive past its
// life. (Read from the wall clock, it lived an hour longer each time.)
func TestLeaseLifeOnTheMonotonicClock(t *testing.T) {
	n := &Node{}
	clk := &steppingClock{wall: time.Now(), mono: 5000}
	n.leases.clock = clk
	n.leases.init()
	n.bgOff = true // (no asks for the next lease)
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 100_000, Window: time.Hour}
	b := &borrowed{rule: rule, size: 100, at: clk.Mono(), until: clk.Mono() + leaseTTL.Milliseconds(), from: "holder", id: 1}
	b.left.Store(100)
	n.leases.held["k"] = b
	n.leases.nheld.Store(1)
	step := func(mono time.Duration) {
		clk.mono += mono.Milliseconds()
		clk.wall = clk.wall.Add(-time.Hour)
	}
	step(leaseTTL / 2)
	if _, ok := n.fromLease("k", rule, 1); !ok {
		t.Fatal("half its life on, the lease decided nothing")
	}
	step(leaseTTL / 2)
	if d, ok := n.fromLease("k", rule, 1); ok {
		t.Fatalf("its life over, the lease still decided: %+v", d)
	}
}

// A node grants leases from its start: a key made hot as a cluster forms
// is leased at once. (A node granted none in its first second, and its
// borrowers' declined asks backed off to one a second: a key made hot then
// waited seconds for a lease.)
func TestNewNodeLeasesAtOnce(t *testing.T) {
	n := &Node{}
	clk := &steppingClock{wall: time.Now(), mono: 0}
	n.leases.clock = clk
	n.leases.init()
	n.leases.lentMu.Lock()
	settled := n.leases.settled("k", clk.Mono())
	n.leases.lentMu.Unlock()
	if !settled {
		t.Fatal("a node just started leases no key")
	}
	// A key whose state just came here still waits a lease's life.
	n.leases.arrived("k")
	n.leases.lentMu.Lock()
	defer n.leases.lentMu.Unlock()
	if n.leases.settled("k", clk.Mono()) {
		t.Fatal("a key whose state just came here is leased")
	}
	if n.leases.settled("k", clk.Mono()+leaseTTL.Milliseconds()-1) {
		t.Fatal("a key whose state came here less than a lease's life ago is leased")
	}
	if !n.leases.settled("other", clk.Mono()) {
		t.Fatal("a key started here waits")
	}
	if w := askWait(255); w > 250 {
		t.Fatalf("declined asks back off to one every %d ms, want at most 250", w)
	}
}
