package node

import (
	"sync"

	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/ring"
)

// moves is what the push loop looks at after a ring change, so that a
// change costs what it moves instead of a scan of every key: the arcs this
// node lost in each change (ring.Moved; a change that moves none of its
// keys adds none), and the stray keys, whose state arrived or started here
// while another member owned them in this node's ring (a push or a
// forwarded call from a member whose ring was not this one's, a decision
// on a snapshot the ring had moved past). Both are bounded: beyond the
// bounds, the next push scans every key, as a change did before.
type moves struct {
	mu     sync.Mutex
	arcs   []memstore.Arc
	strays map[string]struct{}
	all    bool // scan every key
}

const (
	maxMoveArcs = 1 << 14 // arcs waiting for a push (256 points a member: 64 changes of a 100-member ring at least)
	maxStrays   = 1 << 16 // stray keys waiting for a push
)

// lost records the arcs a change from prev to next took from the member
// named self. The first ring (prev nil) makes the next push scan every key:
// calls decided before it had no ring to go by.
func (mv *moves) lost(prev, next *ring.Ring, self string) {
	var arcs []ring.Arc
	if prev != nil {
		_, arcs = ring.Moved(prev, next, self)
	}
	mv.mu.Lock()
	defer mv.mu.Unlock()
	if prev == nil || len(mv.arcs)+len(arcs) > maxMoveArcs {
		mv.all, mv.arcs = true, nil
		return
	}
	if mv.all {
		return
	}
	for _, a := range arcs {
		mv.arcs = append(mv.arcs, memstore.Arc{Start: a.From, End: a.To})
	}
}

// stray records key as held here while another member owns it.
func (mv *moves) stray(key string) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	if mv.all {
		return
	}
	if len(mv.strays) >= maxStrays {
		mv.all, mv.strays = true, nil
		return
	}
	if mv.strays == nil {
		mv.strays = map[string]struct{}{}
	}
	mv.strays[key] = struct{}{}
}

// pending reports whether strays wait for a push.
func (mv *moves) pending() bool {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	return len(mv.strays) > 0
}

// take returns what was recorded, and forgets it.
func (mv *moves) take() (arcs []memstore.Arc, strays map[string]struct{}, all bool) {
	mv.mu.Lock()
	defer mv.mu.Unlock()
	arcs, strays, all = mv.arcs, mv.strays, mv.all
	mv.arcs, mv.strays, mv.all = nil, nil, false
	return
}
