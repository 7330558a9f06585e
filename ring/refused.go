package ring

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// A killed member's process is gone, but gossip takes a probe, its
// timeout and the suspicion (half a second with FastLocalConfig) to say
// so: memberlist has to tell a dead member from a slow one by silence
// alone. A refused connection tells them apart at once: a live process,
// however starved, has its port bound, and the kernel accepts on its
// behalf. So a call to a member that fails on a refused or reset
// connection (Refused) has this member try a TCP connection to that
// member's gossip port; if it is refused too, the member is dropped from
// this member's ring at once, ahead of memberlist. A slow, paused or cut
// off member (a connection that times out) is left to memberlist.
//
// A member dropped so comes back when memberlist tells of it again (it
// refuted, or restarted), or when its gossip port accepts again while
// memberlist still holds it alive: every ReconnectInterval, it is asked.

// maxRefusedChecks bounds the checks on their way at once.
const maxRefusedChecks = 16

// refusedReadWait is how long a check waits on a connection that was
// accepted, for a reset from a listener closing as its process dies.
const refusedReadWait = 50 * time.Millisecond

// refusedCheckTimeout bounds a check's connection attempt: a refusal
// comes at once; anything slower is not one.
const refusedCheckTimeout = 250 * time.Millisecond

// Refused reports that a call to the member name just failed on a refused
// or reset connection (not a timeout). It returns at once; the check runs
// in the background, one a member at a time.
func (m *Membership) Refused(name string) {
	if name == m.cfg.Name {
		return
	}
	m.mu.Lock()
	info, ok := m.members[name]
	if !ok || m.checking[name] || len(m.checking) >= maxRefusedChecks {
		m.mu.Unlock()
		return
	}
	m.checking[name] = true
	m.mu.Unlock()
	m.life.RLock()
	if m.closed || m.left.Load() {
		m.life.RUnlock()
		m.mu.Lock()
		delete(m.checking, name)
		m.mu.Unlock()
		return
	}
	m.wg.Add(1)
	m.life.RUnlock()
	go m.checkRefused(name, info.addr)
}

// refuses reports whether the process behind addr is gone: a TCP
// connection to it is refused, or accepted and then reset or closed
// within refusedReadWait. (A process being killed may close its other
// sockets, the peer link first, before its listener: the kernel still
// accepts for it, then resets. A live one, memberlist, reads what comes
// and waits TCPTimeout, 0.5 s at least, before it closes; a stopped one
// never reads. The wait is at most half of TCPTimeout.)
func (m *Membership) refuses(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, refusedCheckTimeout)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(min(refusedReadWait, m.cfg.TCPTimeout/2)))
	var b [1]byte
	_, err = c.Read(b[:])
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// checkRefused drops name, whose gossip address is addr, if its gossip
// port refuses a connection, and then watches for its return.
func (m *Membership) checkRefused(name, addr string) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		delete(m.checking, name)
		m.mu.Unlock()
	}()
	if !m.refuses(addr) {
		return
	}
	m.mu.Lock()
	info, ok := m.members[name]
	if !ok || info.addr != addr {
		m.mu.Unlock()
		return // dropped, or back at another address, meanwhile
	}
	delete(m.members, name)
	m.refused[name] = info
	m.mu.Unlock()
	m.log.Warn("ring: member dropped", "peer", name, "addr", addr, "cause",
		"refused: a call to it failed on a refused or reset connection, and its gossip port refused one too: its process is gone")
	m.notify()

	t := time.NewTicker(m.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.mu.Lock()
		_, still := m.refused[name]
		m.mu.Unlock()
		if !still {
			return // memberlist told of it since (record)
		}
		var node *memberlist.Node
		for _, n := range m.ml.Members() {
			if n.Name == name {
				node = n
			}
		}
		switch {
		case node == nil:
			// memberlist declared it failed or left, and its event
			// (record) takes over; one that came while the member was
			// dropped here found it unknown.
			m.mu.Lock()
			delete(m.refused, name)
			m.mu.Unlock()
			return
		case node.Address() != addr || !m.refuses(addr):
			// Back, and memberlist holds it alive with nothing new to
			// tell: it goes on the ring again as memberlist has it.
			(*events)(m).record(node, true)
			return
		}
	}
}

// Refusing reports whether name is off this member's ring because its
// gossip port refused (and neither gossip nor the port has told otherwise
// since).
func (m *Membership) Refusing(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.refused[name]
	return ok
}
