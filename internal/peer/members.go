package peer

import (
	"net"
	"net/netip"
	"sync/atomic"
)

// Members is the set of IP addresses of a cluster's current members, for a
// Server's ServerConfig.Member: a node sets it from gossip on every change
// of membership, and the server reads it without a lock. The zero value is
// an empty set. Members is safe for simultaneous use by multiple
// goroutines.
type Members struct {
	p atomic.Pointer[map[netip.Addr]struct{}]
}

// Set replaces the set with the hosts of addrs ("host:port" or "host").
// A host that is not an IP address (a name) is left out: a member that
// advertises one gets no reserved handshake slot.
func (m *Members) Set(addrs []string) {
	set := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		h, _, err := net.SplitHostPort(a)
		if err != nil {
			h = a
		}
		if ip, err := netip.ParseAddr(h); err == nil {
			set[ip.Unmap()] = struct{}{}
		}
	}
	m.p.Store(&set)
}

// Has reports whether ip is a member's address.
func (m *Members) Has(ip netip.Addr) bool {
	set := m.p.Load()
	if set == nil {
		return false
	}
	_, ok := (*set)[ip.Unmap()]
	return ok
}
