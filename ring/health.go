package ring

import (
	"fmt"
	"time"
)

// A member that runs late does not trust its own verdicts at once
// (Lifeguard's local health): see Config.Stalled.
const (
	stallHoldMin = 50 * time.Millisecond // a lag below it is a busy host, not a starved one
	stallHoldMax = time.Second
)

// heldMember is a member declared failed that stays on the ring a while,
// because this member was descheduled lately.
type heldMember struct {
	addr string
	hold time.Duration
	t    *time.Timer
}

// holdFor is how long a member declared failed stays on the ring: twice
// the stall this member saw lately, at most 1 s; 0 when it runs on time.
func (m *Membership) holdFor() time.Duration {
	if m.cfg.Stalled == nil {
		return 0
	}
	s := m.cfg.Stalled()
	if s < stallHoldMin {
		return 0
	}
	return min(2*s, stallHoldMax)
}

// hold keeps the failed member name on the ring for d; m.mu is held.
func (m *Membership) hold(name, addr string, d time.Duration) {
	if _, ok := m.held[name]; ok {
		return
	}
	m.held[name] = heldMember{addr: addr, hold: d, t: time.AfterFunc(d, func() { m.release(name) })}
}

// unhold forgets a hold: the member refuted, or left; m.mu is held.
func (m *Membership) unhold(name string) {
	if h, ok := m.held[name]; ok {
		h.t.Stop()
		delete(m.held, name)
	}
}

// release drops a held member whose hold ran out without a refutation.
func (m *Membership) release(name string) {
	m.mu.Lock()
	h, ok := m.held[name]
	if !ok {
		m.mu.Unlock()
		return
	}
	delete(m.held, name)
	_, known := m.members[name]
	delete(m.members, name)
	m.failed[name] = failedMember{addr: h.addr, at: time.Now()}
	evictOldest(m.failed, func(f failedMember) time.Time { return f.at })
	m.mu.Unlock()
	if known {
		m.log.Warn("ring: member dropped", "peer", name, "addr", h.addr, "cause",
			fmt.Sprintf("failed: it did not answer probes, direct or indirect, nor refute the suspicion in time, nor in the %v this member waited more because it was descheduled lately", h.hold))
	}
	m.notify()
}

// stopHolds stops the holds' timers (Shutdown).
func (m *Membership) stopHolds() {
	m.mu.Lock()
	for name := range m.held {
		m.unhold(name)
	}
	m.mu.Unlock()
}
