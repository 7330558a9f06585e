package ring

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// partition is a network fault for this test: it splits members (by gossip
// address) into groups that cannot reach each other, and heals.
type partition struct {
	mu    sync.RWMutex
	group map[string]int // gossip address → group; nil: healed
}

func (p *partition) split(groups ...[]string) {
	g := map[string]int{}
	for i, addrs := range groups {
		for _, a := range addrs {
			g[a] = i
		}
	}
	p.mu.Lock()
	p.group = g
	p.mu.Unlock()
}

func (p *partition) heal() {
	p.mu.Lock()
	p.group = nil
	p.mu.Unlock()
}

func (p *partition) cut(from, to string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	gf, okf := p.group[from]
	gt, okt := p.group[to]
	return okf && okt && gf != gt
}

// wrap is a Config.WrapTransport that applies the partition to a member.
func (p *partition) wrap(self string, t Transport) Transport {
	return &partitioned{Transport: t, p: p, self: self}
}

type partitioned struct {
	Transport
	p    *partition
	self string
}

func (t *partitioned) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.p.cut(t.self, addr) {
		return time.Now(), nil // lost on the way
	}
	return t.Transport.WriteTo(b, addr)
}

func (t *partitioned) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.p.cut(t.self, addr) {
		return nil, errors.New("partitioned (test fault)")
	}
	return t.Transport.DialTimeout(addr, timeout)
}

// A partition is detected on both sides, and once it heals the reconnect
// loop merges the two halves again within a few reconnect intervals. The
// fault sits in Config.WrapTransport, ring's own Transport interface.
func TestMembershipPartitionHeals(t *testing.T) {
	p := &partition{}
	ms := startCluster(t, 5, func(_ int, c *Config) { c.WrapTransport = p.wrap })
	addr := func(i int) string { return ms[i].GossipAddr() }
	left, right := ms[:2], ms[2:]

	p.split([]string{addr(0), addr(1)}, []string{addr(2), addr(3), addr(4)})
	took := waitFor(t, 5*time.Second, "each side to drop the other", func() bool {
		return allSee(left, names(2)) && allSee(right, []string{"node-2", "node-3", "node-4"})
	})
	t.Logf("partition detected on both sides after %v", took)

	p.heal()
	// Merged: every member sees all five and has no one left to reconnect.
	took = waitFor(t, 10*time.Second, "the halves to merge", func() bool {
		if !allSee(ms, names(5)) {
			return false
		}
		for _, m := range ms {
			m.mu.Lock()
			n := len(m.failed)
			m.mu.Unlock()
			if n != 0 {
				return false
			}
		}
		return true
	})
	t.Logf("healed partition merged after %v", took)
	if took > 2*time.Second {
		t.Errorf("merging took %v, want a few reconnect intervals (%v each)", took, FastLocalConfig("").ReconnectInterval)
	}
}
