package ring

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// errPartitioned is what a dial across a Partition returns.
var errPartitioned = errors.New("ring: partitioned (test fault)")

// Partition is a network fault for tests: it splits members into groups that
// cannot reach each other, and heals. Give every member of the cluster the
// same Partition's Wrap as Config.WrapTransport; it drops the packets and
// refuses the streams a member sends to a member of another group. Members
// are named by their gossip address (Membership.GossipAddr). A Partition is
// safe for simultaneous use by multiple goroutines.
type Partition struct {
	mu    sync.RWMutex
	group map[string]int // gossip address → group; nil: healed
}

// NewPartition returns a healed Partition.
func NewPartition() *Partition { return &Partition{} }

// Split cuts the network between the groups of gossip addresses: a member
// reaches only the members of its own group. Addresses in no group reach
// everyone. It replaces any earlier split.
func (p *Partition) Split(groups ...[]string) {
	g := make(map[string]int)
	for i, addrs := range groups {
		for _, a := range addrs {
			g[a] = i
		}
	}
	p.mu.Lock()
	p.group = g
	p.mu.Unlock()
}

// Heal lets every member reach every other again.
func (p *Partition) Heal() {
	p.mu.Lock()
	p.group = nil
	p.mu.Unlock()
}

func (p *Partition) cut(from, to string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	gf, okf := p.group[from]
	gt, okt := p.group[to]
	return okf && okt && gf != gt
}

// Wrap is a Config.WrapTransport that applies the Partition to a member.
func (p *Partition) Wrap(t memberlist.Transport) memberlist.Transport {
	return &partitionedTransport{Transport: t, p: p}
}

type partitionedTransport struct {
	memberlist.Transport
	p    *Partition
	mu   sync.Mutex
	self string // the advertised address memberlist settled on
}

func (t *partitionedTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	addr, p, err := t.Transport.FinalAdvertiseAddr(ip, port)
	if err == nil {
		t.mu.Lock()
		t.self = net.JoinHostPort(addr.String(), strconv.Itoa(p))
		t.mu.Unlock()
	}
	return addr, p, err
}

func (t *partitionedTransport) cut(to string) bool {
	t.mu.Lock()
	self := t.self
	t.mu.Unlock()
	return t.p.cut(self, to)
}

func (t *partitionedTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.cut(addr) {
		return time.Now(), nil // lost on the way
	}
	return t.Transport.WriteTo(b, addr)
}

func (t *partitionedTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.cut(addr) {
		return nil, errPartitioned
	}
	return t.Transport.DialTimeout(addr, timeout)
}
