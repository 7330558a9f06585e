package node

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/local"
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

// errPeerGone is why a push stops when its target left the ring between
// attempts.
var errPeerGone = errors.New("node: hand-off target left")

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
	// The target may leave between attempts: its name stays for the log.
	to := pc.name
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if attempt > 0 {
			if pc = n.peers.get(to); pc == nil {
				err = errors.Join(err, errPeerGone)
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
	n.cfg.Logger.Warn("node: hand-off push failed", "node", n.name, "to", to, "keys", len(items), "err", err)
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
