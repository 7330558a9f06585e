package ring

import (
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// Transport is how a member's gossip leaves it: packets and streams to other
// members' gossip addresses. It is ringlimit's own interface, so that the
// packages above ring (and their tests, which put faults here) never name
// memberlist's types. ring binds memberlist's UDP/TCP transport, which
// implements it, and Config.WrapTransport may put another in front of it.
type Transport interface {
	// WriteTo sends the packet b to the gossip address addr and returns
	// when it left.
	WriteTo(b []byte, addr string) (time.Time, error)
	// DialTimeout opens a stream to the gossip address addr.
	DialTimeout(addr string, timeout time.Duration) (net.Conn, error)
}

var _ Transport = (*memberlist.NetTransport)(nil)

// wrapped is memberlist's transport whose outgoing packets and streams go
// through out (Config.WrapTransport's result); what comes in is unchanged.
type wrapped struct {
	memberlist.Transport
	out Transport
}

func (w *wrapped) WriteTo(b []byte, addr string) (time.Time, error) { return w.out.WriteTo(b, addr) }

func (w *wrapped) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return w.out.DialTimeout(addr, timeout)
}
