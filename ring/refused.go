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
// memberlist still holds it alive: every 250 ms, it is asked.

// maxRefusedChecks bounds the checks (and the watches of members dropped
// so) on their way at once.
const maxRefusedChecks = 16

// refusedReadWait is how long a check waits on a connection that was
// accepted, for a reset from a listener closing as its process dies (a
// variable: tests lengthen it).
var refusedReadWait = 50 * time.Millisecond

// refusedCheckTimeout bounds a check's connection attempt: a refusal
// comes at once; anything slower is not one.
const refusedCheckTimeout = 250 * time.Millisecond

// refusedRecheck is how often a member dropped on a refusal is checked
// again while memberlist still holds it alive; refusedGap is the least
// time between two checks of a member that answered one.
const (
	refusedRecheck = 250 * time.Millisecond
	refusedGap     = 100 * time.Millisecond
)

// Refused reports that a call to the member name just failed on a refused
// or reset connection (not a timeout). It returns at once; the check runs
// in the background, one a member at a time.
func (m *Membership) Refused(name string) {
	if name == m.cfg.Name {
		return
	}
	now := time.Now()
	m.mu.Lock()
	info, ok := m.members[name]
	if !ok || m.checking[name] || len(m.checking) >= maxRefusedChecks || now.Sub(m.checked[name]) < refusedGap {
		m.mu.Unlock()
		return
	}
	m.checking[name] = true
	m.mu.Unlock()
	// (Never waits: a Shutdown waiting behind a Join must not hold up a
	// forward.)
	if !m.life.TryRLock() {
		m.doneChecking(name)
		return
	}
	if m.closed || m.left.Load() {
		m.life.RUnlock()
		m.doneChecking(name)
		return
	}
	m.wg.Add(1)
	m.life.RUnlock()
	go m.checkRefused(name, info)
}

func (m *Membership) doneChecking(name string) {
	m.mu.Lock()
	delete(m.checking, name)
	if len(m.checked) >= maxRemembered {
		clear(m.checked)
	}
	m.checked[name] = time.Now()
	m.mu.Unlock()
}

// verdict is what a check of a member's gossip port found.
type verdict uint8

const (
	unknown  verdict = iota // no answer in time, or no route: left to gossip
	gone                    // refused, or accepted and reset at once: the process is gone
	listened                // accepted and held: a process reads it
)

// check tries a TCP connection to the gossip port at addr. A refusal is
// gone. So is a connection accepted and then reset or closed within
// refusedReadWait of the dial (a process being killed may close its other
// sockets, the peer link first, before its listener: the kernel still
// accepts for it, then resets). A connection still open after that wait
// is listened: memberlist reads what comes and waits TCPTimeout before it
// closes, and a stopped process never reads (the kernel accepts for it).
// A close that comes later than the wait (this member descheduled meanwhile,
// a short TCPTimeout) is unknown. The wait is at most half of TCPTimeout.
func (m *Membership) check(addr string) verdict {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, refusedCheckTimeout)
	if err != nil {
		// A reset during the dial is the same evidence as one after it: a
		// listener that accepts and resets at once can do so before a
		// descheduled dialer reads its connection's state (the verdict was
		// unknown then: TestRefusesTellsTheDyingFromTheLive, once beside
		// four busy loops).
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
			return gone
		}
		return unknown
	}
	defer c.Close()
	if m.cfg.Label != "" {
		// Said as memberlist's own streams say it: a live member then
		// reads on (and sees only an end of stream) instead of
		// logging a stream with no label.
		if err := memberlist.AddLabelHeaderToStream(c, m.cfg.Label); err != nil {
			return unknown
		}
	}
	wait := min(refusedReadWait, m.cfg.TCPTimeout/2)
	_ = c.SetReadDeadline(start.Add(wait))
	var b [1]byte
	_, err = c.Read(b[:])
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return listened
	case err != nil && time.Since(start) < wait:
		return gone
	case err == nil:
		return listened // (memberlist sends nothing first; something reads and writes)
	}
	return unknown
}

// checkRefused drops name, last recorded as info, if its gossip port says
// its process is gone, and then watches for its return. A member that runs
// late itself (see Config.Stalled) does not trust its verdict.
func (m *Membership) checkRefused(name string, info memberInfo) {
	defer m.wg.Done()
	defer m.doneChecking(name)
	if m.check(info.addr) != gone || m.holdFor() > 0 {
		return
	}
	m.mu.Lock()
	if cur, ok := m.members[name]; !ok || cur != info {
		m.mu.Unlock()
		return // dropped, restarted or moved meanwhile
	}
	delete(m.members, name)
	m.refused[name] = info
	m.mu.Unlock()
	m.log.Warn("ring: member dropped", "peer", name, "addr", info.addr, "cause",
		"refused: a call to it failed on a refused or reset connection, and its gossip port refused one too: its process is gone")
	m.notify()

	t := time.NewTicker(refusedRecheck)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		if !m.Refusing(name) {
			return // memberlist told of it since (record)
		}
		alive := false
		for _, n := range m.ml.Members() {
			alive = alive || n.Name == name // (only the name is read: memberlist may be changing the rest)
		}
		if !alive {
			// memberlist declared it failed or left: its event (record)
			// takes over, or took over while it was dropped here.
			m.mu.Lock()
			delete(m.refused, name)
			m.mu.Unlock()
			return
		}
		if m.check(info.addr) != listened {
			continue
		}
		// Back, and memberlist holds it alive with nothing new to tell:
		// it goes on the ring again as it was, unless memberlist told of
		// it meanwhile (record cleared refused: its word is the latest).
		m.mu.Lock()
		_, still := m.refused[name]
		if still {
			delete(m.refused, name)
			m.members[name] = info
			delete(m.failed, name)
		}
		m.mu.Unlock()
		if still {
			m.log.Info("ring: member back", "peer", name, "addr", info.addr, "cause", "its gossip port accepts again")
			m.notify()
		}
		return
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
