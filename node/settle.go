package node

import (
	"sync"
	"time"
)

// Settling the ring changes whose members wait on each other's Done
// (hold.Core.Settle has the argument): a member says Done only once it is
// Clean, and it is Clean only once its older changes are resolved, so when
// views change faster than a round of Done (a join right after a join, a
// rolling restart) every member can wait on another, and the changes stay
// open. Changing then stays true for HandoffWindow, and owned keys without
// a state here take the slow path meanwhile.
//
// A node that has changes open, and nothing on its way, asks every other
// member of its view for its word (idle in that view, and its count of
// arrivals), twice; the second round starts once every answer of the first
// came. If every word is idle both times and no count moved, including its
// own, the changes are resolved, and the node says Done as usual. Nothing
// is changed by asking: a member that is not idle, a word lost, a view that
// changed meanwhile, and the node tries again later, less often each time
// (settleWait), until its view changes.
const (
	// settleAfter is how long after a view changes the node leaves it to
	// the members' Done, which resolves most changes within a few round
	// trips, before it asks for words.
	settleAfter = 200 * time.Millisecond
	// settleWait is the first wait between two tries for one view; it
	// doubles up to settleMaxWait.
	settleWait    = 200 * time.Millisecond
	settleMaxWait = 5 * time.Second
	// settleConc bounds the words asked at once.
	settleConc = 16
)

// idleLocked is this node's word for a settle: the core is Idle and every
// push of the view is confirmed. Under the lock.
func (n *Node) idleLocked() bool {
	o := &n.own
	return !o.pushFail && len(o.outbox) == 0 && o.core.Idle()
}

// maybeSettle starts a settle, on the node's ticker, if one is due: changes
// open, nothing on the way here, the view older than settleAfter, and the
// wait since the last try over. The settle runs in the background.
func (n *Node) maybeSettle() {
	o := &n.own
	now := time.Now()
	o.mu.Lock()
	if o.settleView != o.viewID {
		o.settleView, o.settleNext, o.settleWait = o.viewID, o.changedAt.Add(settleAfter), settleWait
	}
	due := o.core.Sources() > 0 && !o.core.Leaving() && !now.Before(o.settleNext) && !n.settling && n.idleLocked()
	if !due {
		o.mu.Unlock()
		return
	}
	id, members := o.viewID, o.view.Load().Members()
	o.settleNext = now.Add(o.settleWait)
	o.settleWait = min(2*o.settleWait, settleMaxWait)
	n.settling = true
	o.mu.Unlock()
	n.bgMu.Lock()
	defer n.bgMu.Unlock()
	if n.bgOff {
		o.mu.Lock()
		n.settling = false
		o.mu.Unlock()
		return
	}
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		ok := n.settle(id, members)
		o.mu.Lock()
		n.settling = false
		o.mu.Unlock()
		if n.tracing {
			n.trace("settle", "view", id, "settled", ok)
		}
	}()
}

// settle asks every other member of the view id for its word, twice, and
// settles the core's open changes if every word held both times. It
// reports whether they were settled.
func (n *Node) settle(id uint64, members []string) bool {
	o := &n.own
	var first map[string]uint64
	for range 2 {
		o.mu.Lock()
		ok, self := o.viewID == id && n.idleLocked(), o.core.Arrivals()
		o.mu.Unlock()
		if !ok || first != nil && first[n.name] != self {
			return false
		}
		words := n.askWords(id, members)
		if words == nil {
			return false
		}
		if first == nil {
			words[n.name] = self
			first = words
			continue
		}
		for m, a := range words {
			if first[m] != a {
				return false
			}
		}
	}
	o.begin()
	if o.viewID != id || !n.idleLocked() || o.core.Arrivals() != first[n.name] {
		o.end()
		return false
	}
	clean := o.core.Settle(id)
	o.end()
	if clean {
		n.kick() // (the push loop says Done)
	}
	return true
}

// askWords asks every member but this node for its word on the view id,
// settleConc at a time, and returns their arrival counts; nil if any did
// not answer, answered what does not parse, or is not idle in that view.
func (n *Node) askWords(id uint64, members []string) map[string]uint64 {
	var (
		mu    sync.Mutex
		words = make(map[string]uint64, len(members))
		ok    = true
		wg    sync.WaitGroup
		sem   = make(chan struct{}, settleConc)
	)
	for _, m := range members {
		if m == n.name {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res, err := n.holdCall(m, &holdMsg{kind: holdSettle, from: n.name, viewID: id}, 0)
			var w settleWord
			if err == nil {
				w, err = parseSettleWord(res.State)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil || !w.idle {
				ok = false
				return
			}
			words[m] = w.arrivals
		}()
	}
	wg.Wait()
	if !ok {
		return nil
	}
	return words
}
