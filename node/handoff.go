package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/node/peer"
	"github.com/ringlimit/ringlimit/remote"
	"github.com/ringlimit/ringlimit/ring"
)

// Hand-off: a key's state follows the key when its owner changes.
//
//   - Leave (Close): the node freezes its keys (every call on them is
//     redirected from then on), pushes every state to the key's owner in
//     the ring without it, then leaves the gossip.
//   - Join: when a member joins, each node gives up the keys the new member
//     now owns (a moved mark stays in their place) and pushes their states
//     to it.
//   - Pull: a node in the hand-off window after a ring change that owns a
//     key it holds no state for takes the state from the key's previous
//     owner before deciding; if that owner is gone, it loads the state the
//     owner wrote behind to the store.
//   - Redirect: a node that gave a key up answers its calls with "moved to
//     X"; the caller's node retries at X (at most maxRedirects times), with
//     From set so X pulls the state from it if the push has not arrived.
//
// Pushes and pulls on one node are ordered by handoffMu: a pull waits for a
// push in flight, so it never answers "no state" for a state still on its
// way to the puller.

const (
	modeLeaving    = 1 << iota // Close has begun: every key is redirected
	modeTransition             // within HandoffWindow of a ring change: pull before deciding a key without state
)

// maxRedirects bounds the "moved" answers one call follows.
const maxRedirects = 2

// batchBytes is the size a push batch is cut at.
const batchBytes = 256 << 10

// ringWithout returns r without the member named name.
func ringWithout(r *ring.Ring, name string) *ring.Ring {
	var ms []string
	for _, m := range r.Members() {
		if m != name {
			ms = append(ms, m)
		}
	}
	return ring.New(ms, r.VirtualNodes())
}

// encodeState is a state on the wire: until (ms, 8 bytes little-endian),
// then remote.EncodeState.
func encodeState(s local.State) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(s.Until))
	return append(b, remote.EncodeState(toRemote(s))...)
}

func decodeState(b []byte) (local.State, error) {
	if len(b) < 8 {
		return local.State{}, fmt.Errorf("node: state of %d bytes", len(b))
	}
	rs, err := remote.DecodeState(b[8:])
	if err != nil {
		return local.State{}, err
	}
	return fromRemote(rs, int64(binary.LittleEndian.Uint64(b))), nil
}

func toRemote(s local.State) remote.State {
	r := remote.State{Algorithm: s.Algorithm, Window: s.Window, A: s.A, B: s.B, C: s.C}
	if len(s.Log) > 0 {
		r.Log = make([]remote.LogEntry, len(s.Log))
		for i, e := range s.Log {
			r.Log[i] = remote.LogEntry{Stamp: e.Stamp, Count: e.Count}
		}
	}
	return r
}

func fromRemote(r remote.State, until int64) local.State {
	s := local.State{Algorithm: r.Algorithm, Window: r.Window, A: r.A, B: r.B, C: r.C, Until: until}
	if len(r.Log) > 0 {
		s.Log = make([]local.LogEntry, len(r.Log))
		for i, e := range r.Log {
			s.Log[i] = local.LogEntry{Stamp: e.Stamp, Count: e.Count}
		}
	}
	return s
}

// nowMs is the node's clock in ms.
func (n *Node) nowMs() int64 {
	if n.cfg.Clock != nil {
		return n.cfg.Clock.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// ringChanged runs on the membership's goroutine after each change.
func (n *Node) ringChanged(r *ring.Ring) {
	prev := n.lastRing.Swap(r)
	if prev != nil {
		n.prevRing.Store(prev)
	}
	n.minusMe.Store(ringWithout(r, n.name))
	if r.Len() > 1 {
		n.readyOnce.Do(func() { close(n.ready) })
	}
	n.transitionUntil.Store(time.Now().Add(n.cfg.HandoffWindow).UnixNano())
	n.mode.Or(modeTransition)
	if prev != nil {
		select {
		case n.kickPush <- struct{}{}:
		default:
		}
	}
}

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

func (n *Node) pullTimeout() time.Duration { return max(2*n.cfg.ForwardTimeout, 500*time.Millisecond) }

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
// within StoreTimeout.
func (n *Node) load(ctx context.Context, key string) {
	if n.states == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, n.cfg.StoreTimeout)
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

// serveStates installs the states a peer pushed.
func (n *Node) serveStates(items []peer.Item) peer.Result {
	for _, it := range items {
		n.install(it.Key, it.Value)
	}
	return peer.Result{}
}

// pushLoop pushes the keys that new members own to them, after each join.
func (n *Node) pushLoop() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.kickPush:
		}
		if n.mode.Load()&modeLeaving == 0 {
			n.forgetDeparted()
			n.pushMoved()
		}
	}
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

// pushMoved gives up the keys that another member owns now and pushes their
// states to it. A batch that cannot be delivered is taken back.
func (n *Node) pushMoved() {
	r := n.members.Ring()
	byOwner := map[string][]string{}
	n.local.Range(func(key string, _ local.State) bool {
		if o := r.Owner(key); o != n.name && o != "" {
			byOwner[o] = append(byOwner[o], key)
		}
		return true
	})
	until := n.nowMs() + n.cfg.HandoffWindow.Milliseconds()
	for owner, keys := range byOwner {
		pc := n.peers.get(owner)
		if pc == nil {
			continue
		}
		for len(keys) > 0 {
			if n.mode.Load()&modeLeaving != 0 {
				return // Close hands everything off
			}
			keys = n.pushBatch(pc, keys, func(key string) (local.State, bool) {
				n.markMoved(key, owner)
				return n.local.Give(key, until)
			}, func(key string, st local.State, ok bool) {
				if n.members.Ring().Contains(owner) {
					// It may hold the state: keep redirecting to it, and
					// keep a copy in the store for it to load.
					if ok && n.states != nil {
						n.lost(key, st)
					}
					return
				}
				if ok {
					n.local.Import(key, st) // replaces the mark
				}
				n.unmarkMoved(key)
			})
		}
	}
}

// pushBatch takes states with take for keys until a batch is full, sends it
// to pc and waits for the answer, all under handoffMu. If the batch cannot
// be delivered, undo gets each key back. It returns the keys left.
func (n *Node) pushBatch(pc *peerConn, keys []string, take func(string) (local.State, bool),
	undo func(string, local.State, bool)) []string {
	n.handoffMu.Lock()
	defer n.handoffMu.Unlock()
	type taken struct {
		key string
		st  local.State
		ok  bool
	}
	var done []taken
	var items []peer.Item
	size := 0
	for len(keys) > 0 && size < batchBytes {
		key := keys[0]
		keys = keys[1:]
		st, ok := take(key)
		done = append(done, taken{key, st, ok})
		if ok {
			v := encodeState(st)
			if 6+len(key)+len(v) > peer.MaxStatesBody-4 {
				continue // too large to hand off: the new owner loads it, or starts afresh
			}
			items = append(items, peer.Item{Key: key, Value: v})
			size += 6 + len(key) + len(v)
		}
	}
	if len(items) == 0 {
		return keys
	}
	// A push whose answer was lost may have been installed: never put the
	// states back while the target may hold them (two holders would both
	// admit). Installing is idempotent (a key that holds a state keeps
	// it), so try again, on a fresh connection if the old one was dropped.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			if pc = n.peers.get(pc.name); pc == nil {
				break
			}
		}
		var res peer.Result
		res, err = pc.bulk.DoTimeout(context.Background(), &peer.Request{Op: peer.OpStates, States: items}, n.pushTimeout())
		if err == nil && res.Err == nil {
			n.stats.handedOff.Add(uint64(len(items)))
			return keys
		}
		err = errors.Join(err, res.Err)
	}
	n.cfg.Logger.Warn("node: hand-off push failed", "node", n.name, "to", pc.name, "keys", len(items), "err", err)
	n.stats.handoffFailures.Add(uint64(len(items)))
	for _, t := range done {
		undo(t.key, t.st, t.ok)
	}
	return keys
}

// lost writes a state that could not be handed off to the store.
func (n *Node) lost(key string, st local.State) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.StoreTimeout)
	defer cancel()
	ks := remote.KeyState{Key: key, State: toRemote(st), TTL: time.Duration(st.Until-n.nowMs()) * time.Millisecond}
	if n.states.WriteStates(ctx, []remote.KeyState{ks}) == nil {
		n.stats.writes.Add(1)
	}
}

func (n *Node) pushTimeout() time.Duration { return max(40*n.cfg.ForwardTimeout, 2*time.Second) }

// handOffAll is the first step of Close: every key is redirected from now
// on, and every state goes to its owner in the ring without this node. The
// states that cannot be delivered are written to the store, if there is one.
func (n *Node) handOffAll() {
	lr := ringWithout(n.members.Ring(), n.name)
	n.leaveRing.Store(lr)
	n.mode.Or(modeLeaving)
	n.local.Freeze() // calls already deciding have finished: Range sees every state
	if lr.Len() == 0 {
		return
	}
	byOwner := map[string][]string{}
	n.local.Range(func(key string, _ local.State) bool {
		o := lr.Owner(key)
		byOwner[o] = append(byOwner[o], key)
		return true
	})
	var lost []remote.KeyState
	now := n.nowMs()
	for owner, keys := range byOwner {
		pc := n.peers.get(owner)
		for len(keys) > 0 {
			if pc == nil {
				for _, k := range keys {
					if st, ok := n.local.Take(k); ok {
						lost = append(lost, remote.KeyState{Key: k, State: toRemote(st), TTL: time.Duration(st.Until-now) * time.Millisecond})
					}
				}
				n.stats.handoffFailures.Add(uint64(len(keys)))
				break
			}
			keys = n.pushBatch(pc, keys, n.local.Take, func(key string, st local.State, ok bool) {
				if ok {
					lost = append(lost, remote.KeyState{Key: key, State: toRemote(st), TTL: time.Duration(st.Until-now) * time.Millisecond})
				}
			})
		}
	}
	if len(lost) > 0 && n.states != nil {
		ctx, cancel := context.WithTimeout(context.Background(), max(n.cfg.StoreTimeout, time.Second))
		if err := n.states.WriteStates(ctx, lost); err == nil {
			n.stats.writes.Add(uint64(len(lost)))
		}
		cancel()
	}
}
