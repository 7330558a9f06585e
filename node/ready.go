package node

import "time"

// Ready reports whether the node has joined its cluster (or is configured
// to be alone: no Join addresses) and has taken what the change it joined
// with moved to it: every member has said Done for it (see internal/hold),
// or, if one never does, the hand-off window after New is over (the keys
// not pushed are pulled on their first call). Once true it stays true until
// Close. Wire it to a readiness probe.
func (n *Node) Ready() bool {
	if n.closed.Load() {
		return false
	}
	if n.ready.Load() {
		return true
	}
	if len(n.cfg.Join) == 0 {
		n.ready.Store(true)
		return true
	}
	select {
	case <-n.joined:
	default:
		return false
	}
	n.own.mu.Lock()
	done := !n.changingLocked() && n.own.core.Joined()
	n.own.mu.Unlock()
	if done || time.Since(n.started) >= n.cfg.HandoffWindow {
		n.ready.Store(true)
		return true
	}
	return false
}
