package node

import (
	"context"
	"time"

	"github.com/ringlimit/ringlimit/internal/peer"
)

// Pulls, and the moved marks a node keeps for the keys it gave up.

// markMoved records that key's calls go to to, for the hand-off window.
func (n *Node) markMoved(key, to string) {
	n.movedMu.Lock()
	var addr string
	if n.members.Ring().Contains(to) {
		addr, _ = n.members.RPCAddr(to)
	}
	n.moved[key] = movedTo{to: to, addr: addr, until: time.Now().Add(n.cfg.HandoffWindow)}
	n.movedMu.Unlock()
}

func (n *Node) unmarkMoved(key string) {
	n.movedMu.Lock()
	delete(n.moved, key)
	n.movedMu.Unlock()
}

// movedTarget is where key's calls go if this node gave it up: "" if it
// did not.
func (n *Node) movedTarget(key string) string {
	n.movedMu.Lock()
	m, ok := n.moved[key]
	n.movedMu.Unlock()
	if ok && time.Now().Before(m.until) {
		if n.current(m) {
			return m.to
		}
		// Given to a member that has left since: what it held was pushed
		// back or written behind; the key is this node's again.
		n.forgetDeparted()
	}
	if n.mode.Load()&modeLeaving != 0 {
		if lr := n.leaveRing.Load(); lr != nil {
			return lr.Owner(key)
		}
	}
	return ""
}

// takeBack drops this node's moved mark on key if it points at from: the
// member this node gave the key to has given it back (it is leaving, or
// redirected the key here), so the state comes from it again.
func (n *Node) takeBack(key, from string) {
	if from == "" {
		return
	}
	n.movedMu.Lock()
	m, ok := n.moved[key]
	if ok && m.to == from {
		delete(n.moved, key)
	}
	n.movedMu.Unlock()
	if ok && m.to == from {
		n.local.Unmark(key)
	}
}

// reclaim removes key's moved mark from the local store if no mark points
// anywhere any more (it was dropped: its member left), and reports whether
// it did: the key is this node's again.
func (n *Node) reclaim(key string) bool {
	n.handoffMu.Lock()
	defer n.handoffMu.Unlock()
	n.movedMu.Lock()
	_, marked := n.moved[key]
	n.movedMu.Unlock()
	if marked || n.mode.Load()&modeLeaving != 0 {
		return false
	}
	n.local.Unmark(key)
	return true
}

// awaitPeer waits, at most the pull timeout or a second, for the member
// named name to appear in this node's membership (a peer that already
// knows it redirected a call to it), and returns its connection.
func (n *Node) awaitPeer(ctx context.Context, name string) *peerConn {
	deadline := time.Now().Add(min(n.pullTimeout(), time.Second))
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-n.stop:
			return nil
		case <-t.C:
		}
		if pc := n.peers.get(name); pc != nil {
			return pc
		}
	}
	return nil
}

// current reports whether the member a mark points at is still the one it
// was given to: in the ring, at the same address (a member that left and
// came back under the same name is another incarnation, holding nothing).
func (n *Node) current(m movedTo) bool {
	if m.addr == "" {
		// Given to a member this node had not seen yet (a new node pulls
		// before every peer knows it): it holds the key until the mark
		// expires.
		return true
	}
	if !n.members.Ring().Contains(m.to) {
		return false
	}
	addr, ok := n.members.RPCAddr(m.to)
	return ok && addr == m.addr
}

type movedTo struct {
	to    string
	addr  string // its RPC address when the mark was made; "" if it was not in the ring yet
	until time.Time
}

// stateSource is the member that may hold key's state when this node owns
// it but holds none, "" if none may: while this node is new, the owner in
// the ring without this node (the one this node took the key from); else
// the owner in the previous ring. departed is the owner in the previous
// ring if it has left the ring since (crashed, or left): whatever it did
// not hand off is in the store, if it wrote it behind.
func (n *Node) stateSource(key string) (src, departed string) {
	prev, cur := n.prevRing.Load(), n.lastRing.Load()
	if o := prev.Owner(key); o != "" && o != n.name && !cur.Contains(o) {
		departed = o
	}
	if time.Since(n.started) < n.cfg.HandoffWindow {
		if n.minusMe.Load().Len() == 0 && len(n.cfg.Join) > 0 {
			// A peer saw this node join before this node saw its ring.
			t := time.NewTimer(n.pullTimeout())
			select {
			case <-n.ready:
			case <-t.C:
			case <-n.stop:
			}
			t.Stop()
		}
		src = n.minusMe.Load().Owner(key)
	} else {
		src = prev.Owner(key)
	}
	if src == n.name {
		src = ""
	}
	return src, departed
}

// ensureState makes sure this node holds key's state before it decides the
// key, if it may be elsewhere: from, if not empty, or the key's previous
// owner. It takes the state from that member; if the member cannot be
// reached, it loads the state from the store. Concurrent calls for one key
// wait for one transfer. Bounded by the pull timeout and StoreTimeout.
func (n *Node) ensureState(ctx context.Context, key, from string) {
	if n.local.Has(key) {
		return
	}
	src, departed := from, ""
	if src == "" {
		src, departed = n.stateSource(key)
	}
	if (src == "" || src == n.name) && departed == "" {
		return
	}
	n.pullMu.Lock()
	if ch, ok := n.pulls[key]; ok {
		n.pullMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return
	}
	ch := make(chan struct{})
	n.pulls[key] = ch
	n.pullMu.Unlock()
	defer func() {
		n.pullMu.Lock()
		delete(n.pulls, key)
		n.pullMu.Unlock()
		close(ch)
	}()
	if n.local.Has(key) {
		return
	}
	if pc := n.peers.get(src); pc != nil && src != n.name {
		res, err := pc.bulk.DoTimeout(ctx, &peer.Request{Op: peer.OpTake, Key: key, From: n.name}, n.pullTimeout())
		if err == nil && res.Err == nil {
			n.stats.pulls.Add(1)
			if res.State != nil {
				n.install(key, res.State)
				return
			}
			if departed == "" {
				return
			}
			// The previous owner is gone and the member asked had
			// nothing: the store has what the previous owner wrote.
		}
		if ctx.Err() != nil {
			return
		}
		n.cfg.Logger.Debug("node: state pull failed; loading from the store", "node", n.name, "from", src, "err", err)
	}
	n.load(ctx, key)
}

// pullTimeout bounds a pull (and the wait for a push in flight), and
// loadTimeout the load from the store after it, by a third of the forward
// timeout each: an owner waiting for a key's state must still answer a
// forwarded call before the forwarder gives up on it (which would send the
// call to the store as well, charging it twice).
func (n *Node) pullTimeout() time.Duration { return n.cfg.ForwardTimeout / 3 }

func (n *Node) loadTimeout() time.Duration { return min(n.cfg.StoreTimeout, n.cfg.ForwardTimeout/3) }

// install imports a state received from a peer.
func (n *Node) install(key string, v []byte) {
	st, err := decodeState(v)
	if err != nil {
		n.cfg.Logger.Warn("node: bad state in a hand-off", "node", n.name, "key", key, "err", err)
		return
	}
	if n.local.Import(key, st) {
		n.stats.received.Add(1)
	}
	n.unmarkMoved(key)
}

// load installs key's state from the store, if there is one and it answers
// within the load timeout.
func (n *Node) load(ctx context.Context, key string) {
	if n.states == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, n.loadTimeout())
	defer cancel()
	rs, ttl, ok, err := n.states.LoadState(lctx, key)
	if err != nil {
		n.stats.loadFailures.Add(1)
		return
	}
	n.stats.loads.Add(1)
	if ok {
		n.local.Import(key, fromRemote(rs, n.nowMs()+ttl.Milliseconds()))
	}
}

// serveTake gives key's state up to from.
func (n *Node) serveTake(key, from string) peer.Result {
	n.handoffMu.Lock()
	defer n.handoffMu.Unlock()
	n.markMoved(key, from)
	st, ok := n.local.Give(key, n.nowMs()+n.cfg.HandoffWindow.Milliseconds())
	if !ok {
		return peer.Result{}
	}
	n.stats.handedOff.Add(1)
	return peer.Result{State: encodeState(st)}
}

// forgetDeparted drops the moved marks that point at members no longer in
// the ring: a member that left gracefully pushed back whatever state it
// held; one that crashed lost it, and the store has what it wrote behind.
func (n *Node) forgetDeparted() {
	n.handoffMu.Lock()
	defer n.handoffMu.Unlock()
	n.movedMu.Lock()
	var gone []string
	for k, m := range n.moved {
		if !n.current(m) {
			gone = append(gone, k)
			delete(n.moved, k)
		}
	}
	n.movedMu.Unlock()
	for _, k := range gone {
		n.local.Unmark(k)
	}
}
