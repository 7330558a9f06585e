package node

import (
	"context"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/local"
)

// Pulls: a node that owns a key it holds no state for, within the hand-off
// window, takes the state from the member that held it before deciding.

// flight is one pull in progress; the calls on the same key wait for it
// (singleflight).
type flight struct {
	done chan struct{}
	to   string
	err  error
}

type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// fetch makes sure key's state is here, pulling it from from (if not empty)
// or from the member that held the key before. It returns "" when the key
// may be decided here now, or the member that holds it. Concurrent fetches
// of one key share one pull.
func (n *Node) fetch(ctx context.Context, key, from string) (string, error) {
	n.pulls.mu.Lock()
	if f, ok := n.pulls.m[key]; ok {
		n.pulls.mu.Unlock()
		select {
		case <-f.done:
			return f.to, f.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	n.pulls.m[key] = f
	n.pulls.mu.Unlock()
	f.to, f.err = n.pull(ctx, key, from)
	n.pulls.mu.Lock()
	delete(n.pulls.m, key)
	n.pulls.mu.Unlock()
	close(f.done)
	return f.to, f.err
}

// pull asks the key's previous holder for its state. If that member is
// gone, or cannot be reached, it loads the state from the store. Bounded by
// the pull timeout and the load timeout.
func (n *Node) pull(ctx context.Context, key, from string) (string, error) {
	src, departed := from, ""
	if src == "" {
		src, departed = n.stateSource(key)
	}
	if src == n.name {
		src = ""
	}
	if src == "" && departed == "" {
		n.settle(key)
		return "", nil
	}
	// The wait for the member and the pull share one pull timeout.
	deadline := time.Now().Add(n.pullTimeout())
	pc := n.peers.get(src)
	if pc == nil && src != "" {
		// Out of the ring: gone, or only suspected for a moment (then it
		// still holds the key).
		pc = n.awaitPeer(ctx, src, deadline)
	}
	if left := time.Until(deadline); pc != nil && left > 0 {
		res, err := pc.bulk.DoTimeout(ctx, &peer.Request{Op: peer.OpTake, Key: key, From: n.name}, left)
		if err == nil && res.Err == nil {
			n.stats.pulls.Add(1)
			switch {
			case res.MovedTo != "" && res.MovedTo != n.name:
				return res.MovedTo, nil // it gave the key on: ask its holder
			case res.State != nil:
				n.install(key, res.State, src)
				return "", nil
			case departed == "":
				n.settle(key)
				return "", nil
			}
			// The previous owner is gone and the member asked had
			// nothing: the store has what the previous owner wrote.
		} else {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			n.cfg.Logger.Debug("node: state pull failed; loading from the store", "node", n.name, "from", src, "err", err)
		}
	}
	n.load(ctx, key)
	n.settle(key)
	return "", nil
}

// settle marks key as decided here for the rest of the hand-off window: no
// pull before its next decision.
func (n *Node) settle(key string) {
	s := n.holders.lock(key)
	if s.get(key) == nil && n.changing.Load() {
		n.holders.set(s, key, &mark{to: n.name, at: n.now().UnixMilli()})
	}
	s.unlock()
}

// install imports a state received from the member named from. A state
// from another member than the one this node gave the key to, while that
// member is in the ring, is stale (a retried push that had arrived, whose
// key this node has passed on since) and is dropped.
func (n *Node) install(key string, v []byte, from string) {
	st, err := decodeState(v)
	if err != nil {
		n.warn.Warn("bad hand-off state", "node: bad state in a hand-off", "node", n.name, "key", key, "err", err)
		return
	}
	s := n.holders.lock(key)
	defer s.unlock()
	if m := s.get(key); m != nil && m.to != n.name && m.to != from && n.inRing(m) {
		return
	}
	if n.local.Import(key, st) {
		n.stats.received.Add(1)
		n.strayIfNotMine(n.members.Ring(), key)
	}
	n.holders.drop(s, key)
	if n.changing.Load() || n.holders.leaving.Load() != nil {
		n.holders.set(s, key, &mark{to: n.name, at: n.now().UnixMilli()})
	}
}

// serveTake gives key's state up to the member named from, and redirects
// the key's calls to it from then on. A key this node gave to a third
// member is answered with that member's name.
func (n *Node) serveTake(key, from string) peer.Result {
	if from == "" || from == n.name {
		return peer.Result{}
	}
	n.holders.moving.Add(1) // until the mark is set (see holders.quiet)
	defer n.holders.moving.Add(-1)
	s := n.holders.lock(key)
	m := s.get(key)
	if m != nil && m.to != n.name && m.to != from && n.current(m) {
		s.unlock()
		return peer.Result{MovedTo: m.to}
	}
	// A state leaves this node once. A copy kept for a push to from that
	// is not confirmed yet goes in this answer, and is gone from here with
	// it; the answer keeps no copy. (A copy served again later would be
	// stale: its holder may have decided on it and passed it on since, and
	// installing it again made a second holder of the key.)
	var st *local.State
	if m != nil && m.to == from && m.st != nil {
		st, m.st = m.st, nil
	} else if x, ok := n.local.Take(key); ok {
		st = &x
	}
	n.holders.drop(s, key)
	n.holders.set(s, key, &mark{to: from, addr: n.addrOf(from), at: n.now().UnixMilli()})
	s.unlock()
	if st == nil {
		return peer.Result{}
	}
	n.stats.handedOff.Add(1)
	return peer.Result{State: encodeState(*st)}
}

// addrOf is the RPC address of the member named name if it is in the ring,
// else "".
func (n *Node) addrOf(name string) string {
	if !n.members.Ring().Contains(name) {
		return ""
	}
	addr, _ := n.members.RPCAddr(name)
	return addr
}

// current reports whether the member a mark points at is still the one it
// was given to: in the ring, at the same address (a member that left and
// came back under the same name is another incarnation, holding nothing).
// A member out of the ring may have crashed, or may only be suspected for a
// moment (gossip under load): decideHereAll then pulls from it, waiting a
// little for it to come back, before it loads the key from the store.
func (n *Node) current(m *mark) bool {
	if m.addr == "" {
		// Given to a member this node had not seen yet (a new node pulls
		// before every peer knows it): it holds the key until the
		// hand-off window ends.
		return true
	}
	return n.inRing(m)
}

// inRing reports whether the member a mark points at is in the ring, at the
// address it had when the mark was made.
func (n *Node) inRing(m *mark) bool {
	addr, ok := n.members.RPCAddr(m.to)
	return ok && n.members.Ring().Contains(m.to) && addr == m.addr
}

// awaitPeer waits until deadline at most for the member named name to
// appear in this node's membership (a peer that already knows it redirected
// a call to it, or it was only suspected for a moment), and returns its
// connection.
func (n *Node) awaitPeer(ctx context.Context, name string, deadline time.Time) *peerConn {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.stop:
			return nil
		case <-t.C:
			return nil
		case <-tick.C:
		}
		if pc := n.peers.get(name); pc != nil {
			return pc
		}
	}
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
			case <-n.joined:
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

// pullTimeout bounds a pull, and loadTimeout the load from the store after
// it, by a third of the forward timeout each: an owner waiting for a key's
// state must still answer a forwarded call before the forwarder gives up on
// it (which would send the call to the store as well, charging it twice).
func (n *Node) pullTimeout() time.Duration { return n.cfg.ForwardTimeout / 3 }

func (n *Node) loadTimeout() time.Duration { return min(n.cfg.StoreTimeout, n.cfg.ForwardTimeout/3) }

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
		now := n.now().UnixMilli()
		if ttl > 0 {
			rs.Until = now + ttl.Milliseconds()
		} // else index 0 has gone: Import skips it and installs the others
		for i := range rs.More { // their Until is their remaining TTL in ms
			rs.More[i].Until += now
		}
		s := n.holders.lock(key)
		if m := s.get(key); m == nil || m.to == n.name {
			// (A member that took the key meanwhile holds it: a state
			// here beside its mark would be a second holder.)
			n.local.Import(key, rs)
			n.strayIfNotMine(n.members.Ring(), key)
		}
		s.unlock()
	}
}
