package node

import (
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// readiness tracks the initial hand-off: the members this node found on
// joining, and which of them have finished pushing it the keys that moved
// to it.
type readiness struct {
	mu       sync.Mutex
	awaiting []string        // members in the first ring with another member, this node aside
	pushed   map[string]bool // members whose push has ended, at most maxPushers
	ready    bool            // latched
}

// maxPushers bounds the names readiness remembers.
const maxPushers = 4096

// Ready reports whether the node has joined its cluster (or is configured
// to be alone: no Join addresses) and has finished the initial pull of the
// keys it owns: every member it found on joining has pushed it the states
// of the keys that moved to it, or, if one never does, the hand-off window
// after New is over (the keys not pushed are pulled on their first call).
// Once true it stays true until Close. Wire it to a readiness probe.
func (n *Node) Ready() bool {
	if n.closed.Load() {
		return false
	}
	r := &n.readiness
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready {
		return true
	}
	if len(n.cfg.Join) == 0 {
		r.ready = true
		return true
	}
	select {
	case <-n.joined:
	default:
		return false
	}
	done := time.Since(n.started) >= n.cfg.HandoffWindow
	if !done {
		done = true
		for _, m := range r.awaiting {
			if !r.pushed[m] {
				done = false
				break
			}
		}
	}
	r.ready = done
	return done
}

// waitPushes records the members of the first ring that holds another
// member: the node is ready once each has pushed to it.
func (n *Node) waitPushes(rg *ring.Ring) {
	r := &n.readiness
	r.mu.Lock()
	for _, m := range rg.Members() {
		if m != n.name {
			r.awaiting = append(r.awaiting, m)
		}
	}
	r.mu.Unlock()
}

// pushedBy records that the member named from finished a push to this node.
func (n *Node) pushedBy(from string) {
	r := &n.readiness
	r.mu.Lock()
	if r.pushed == nil {
		r.pushed = map[string]bool{}
	}
	if len(r.pushed) < maxPushers {
		r.pushed[from] = true
	}
	r.mu.Unlock()
}
