package ring

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeDNS is a resolver whose answer a test sets.
type fakeDNS struct {
	mu    sync.Mutex
	addrs []string
	calls int
}

func (d *fakeDNS) set(addrs []string) {
	d.mu.Lock()
	d.addrs = addrs
	d.mu.Unlock()
}

func (d *fakeDNS) resolve(_ context.Context, host string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls++
	if host != "peers.test" {
		return nil, errors.New("no such host")
	}
	return d.addrs, nil
}

func (d *fakeDNS) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

// Every member restarts at once with new addresses behind one name: while
// the name resolves to nothing each stays alone; once it resolves to the new
// addresses the cluster forms within two seed intervals.
func TestSeedsSurviveFullRestart(t *testing.T) {
	const interval = time.Second
	dns := &fakeDNS{}
	gen := func() []testMember {
		var ms []testMember
		for i := range 3 {
			cfg := FastLocalConfig("seed-" + strconv.Itoa(i))
			cfg.Seeds = []string{"peers.test:7946"}
			cfg.Resolve = dns.resolve
			cfg.SeedInterval = interval
			ms = append(ms, start(t, cfg))
		}
		return ms
	}
	for round := range 2 {
		dns.set(nil)
		ms := gen()
		before := dns.count()
		waitFor(t, 10*time.Second, "every member resolving nothing twice", func() bool { return dns.count() >= before+6 })
		for _, m := range ms {
			if n := m.Ring().Len(); n != 1 {
				t.Fatalf("round %d: %s sees %d members while the name resolves to nothing", round, m.Name(), n)
			}
		}
		var addrs []string
		for _, m := range ms {
			addrs = append(addrs, m.GossipAddr())
		}
		dns.set(addrs)
		took := waitFor(t, 10*time.Second, "the cluster to form from the name", func() bool {
			for _, m := range ms {
				if m.Ring().Len() != 3 {
					return false
				}
			}
			return true
		})
		t.Logf("round %d: formed %v after the name resolved (seed interval %v)", round, took.Round(time.Millisecond), interval)
		if took > 2*interval {
			t.Fatalf("round %d: formed after %v, want within two seed intervals (%v)", round, took, 2*interval)
		}
		for _, m := range ms { // the whole generation goes down at once
			if err := m.Shutdown(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// seedAddrs skips this member and duplicates, keeps a seed's port for bare
// IPs, resolves IP seeds to themselves, and tries at most maxSeedAddrs.
func TestSeedAddrs(t *testing.T) {
	dns := &fakeDNS{}
	cfg := FastLocalConfig("self")
	cfg.Seeds = []string{"peers.test:7000", "10.0.0.1:7001", "other.test:7002"}
	cfg.Resolve = dns.resolve
	cfg.SeedInterval = -1
	m := start(t, cfg)
	dns.set([]string{"10.0.0.9", "10.0.0.9", "10.0.0.8:9", m.GossipAddr()})
	got, _ := m.seedAddrs(context.Background())
	want := map[string]bool{"10.0.0.9:7000": true, "10.0.0.8:9": true, "10.0.0.1:7001": true}
	if len(got) != len(want) {
		t.Fatalf("seedAddrs = %v, want %v", got, want)
	}
	for _, a := range got {
		if !want[a] {
			t.Fatalf("seedAddrs = %v, want %v", got, want)
		}
	}
	var many []string
	for i := range 3 * maxSeedAddrs {
		many = append(many, net.JoinHostPort("10.1.0."+strconv.Itoa(i%250), strconv.Itoa(1000+i)))
	}
	dns.set(many)
	if got, _ := m.seedAddrs(context.Background()); len(got) != maxSeedAddrs {
		t.Fatalf("%d addresses from %d resolved, want at most %d", len(got), len(many)+1, maxSeedAddrs)
	}
}

// A member re-resolves its seeds while alone or while it remembers failed
// members (a partition, or peers that restarted elsewhere), not otherwise.
func TestLonely(t *testing.T) {
	ms := startCluster(t, 2, nil)
	m := ms[0]
	if m.lonely() {
		t.Fatal("a member of a healthy cluster of two is lonely")
	}
	m.mu.Lock()
	m.failed["gone"] = failedMember{addr: "127.0.0.1:1", at: time.Now()}
	m.mu.Unlock()
	if !m.lonely() {
		t.Fatal("a member that remembers a failed member is not lonely")
	}
	alone := start(t, FastLocalConfig("alone"))
	if !alone.lonely() {
		t.Fatal("a member alone is not lonely")
	}
}

// A member that its seeds found first (they reconnect to its port when it
// restarts) has joined: JoinSeeds says so, rather than "no address to join"
// (which made a node decide alone while it knew every member).
func TestJoinSeedsWhenEverySeedIsAMember(t *testing.T) {
	ms := startCluster(t, 2, nil)
	cfg := FastLocalConfig("late")
	cfg.Seeds = []string{ms[0].GossipAddr(), ms[1].GossipAddr()}
	cfg.SeedInterval = -1
	m := start(t, cfg)
	if _, err := ms[0].Join([]string{m.GossipAddr()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the late member to know both", func() bool { return m.Ring().Len() == 3 })
	n, err := m.JoinSeeds(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("JoinSeeds = %d, %v; want 2 seeds that are members already, no error", n, err)
	}
}
