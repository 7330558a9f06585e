package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
	"github.com/ringlimit/ringlimit/ring"
)

// Hand-off: a key's state follows the key when its owner changes.
//
//   - Leave (Close): the node redirects every key from then on (holders'
//     leaving ring), pushes every state to the key's owner in the ring
//     without it, then leaves the gossip.
//   - Join: when a member joins, each node gives up the keys the new member
//     now owns (a mark stays in their place) and pushes their states to it.
//   - Pull: a node in the hand-off window after a ring change that owns a
//     key it holds no state for takes the state from the key's previous
//     owner before deciding (pull.go); if that owner is gone, it loads the
//     state the owner wrote behind to the store.
//   - Redirect: a node that gave a key up answers its calls with "moved to
//     X"; the caller's node goes on at X (at most maxRedirects times), with
//     From set so X pulls the state from it if the push has not arrived.
//
// A state given up in a push leaves the local store and a copy stays in its
// mark (holders) until the target confirms it: a pull that comes before the
// push it overtook gets the copy (once: the copy leaves with it), and the
// later push finds the state installed. A state leaves a node once: a copy
// never goes out twice, and a copy a pull took never comes back here.
// No lock is held while a batch is on the wire.

// maxRedirects bounds the "moved" answers one call follows.
const maxRedirects = 2

// errPeerGone is why a push stops when its target left the ring between
// attempts.
var errPeerGone = errors.New("node: hand-off target left")

// errRefused: the target of a push answered that it installed nothing.
var errRefused = errors.New("node: hand-off refused")

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

// now reads the node's clock.
func (n *Node) now() time.Time {
	if n.cfg.Clock != nil {
		return n.cfg.Clock.Now()
	}
	return time.Now()
}

// nowMs is the node's clock in ms.
func (n *Node) nowMs() int64 { return n.now().UnixMilli() }

// openWindow starts (or extends) the hand-off window.
func (n *Node) openWindow() {
	n.windowMu.Lock()
	n.windowEnd = time.Now().Add(n.cfg.HandoffWindow)
	n.changing.Store(true)
	n.windowMu.Unlock()
}

// closeWindow ends the hand-off window once it is over: the marks go.
func (n *Node) closeWindow() {
	n.windowMu.Lock()
	if n.changing.Load() && time.Now().After(n.windowEnd) && n.holders.leaving.Load() == nil {
		n.changing.Store(false)
		n.holders.clear()
		if n.moves.pending() {
			n.kick() // the strays of the window (see strayIfNotMine)
		}
	}
	n.windowMu.Unlock()
}

// ringChanged runs on the membership's goroutine after each change.
func (n *Node) ringChanged(r *ring.Ring) {
	prev := n.lastRing.Swap(r)
	if prev != nil {
		n.prevRing.Store(prev)
	}
	n.moves.lost(prev, r, n.name)
	n.minusMe.Store(ringWithout(r, n.name))
	if r.Len() > 1 {
		n.joinedOnce.Do(func() {
			n.waitPushes(r)
			close(n.joined)
		})
	}
	n.openWindow()
	if prev != nil || r.Len() > 1 { // a first ring with others in it: it may be a join this node has to push for
		select {
		case n.kickPush <- struct{}{}:
		default:
		}
	}
}

// serveStates installs the states a peer pushed. The first item names the
// sender (its key is empty: no key is); a push of no state after it marks
// the end of the sender's push (see Ready).
func (n *Node) serveStates(items []peer.Item) peer.Result {
	if n.holders.leaving.Load() != nil && len(items) > 1 {
		// Leaving: its own states are on their way out already; one
		// installed now would stay behind. The sender keeps them.
		return peer.Result{Err: ringlimit.ErrClosed}
	}
	from := ""
	if len(items) > 0 && items[0].Key == "" {
		from, items = string(items[0].Value), items[1:]
		if len(items) == 0 { // the end of the sender's push
			n.pushedBy(from)
		}
	}
	for _, it := range items {
		n.install(it.Key, it.Value, from)
	}
	return peer.Result{}
}

// pushLoop pushes the keys that new members own to them, after each join.
func (n *Node) pushLoop() {
	defer n.wg.Done()
	var pushed *ring.Ring // the ring of the last push
	for {
		select {
		case <-n.stop:
			return
		case <-n.kickPush:
		}
		if n.holders.leaving.Load() != nil {
			continue
		}
		n.holders.forget(func(m *mark) bool { return !n.current(m) })
		r := n.members.Ring()
		n.pushMoved(r)
		// Tell each member new since the last push that this node's
		// push is done (a node is Ready once each member it joined has).
		for _, m := range r.Members() {
			if m == n.name || (pushed != nil && pushed.Contains(m)) {
				continue
			}
			// Once, briefly: a member that misses it is Ready when its
			// hand-off window ends instead.
			if pc := n.peers.get(m); pc != nil {
				pc.bulk.DoTimeout(context.Background(), &peer.Request{Op: peer.OpStates, States: []peer.Item{n.header()}}, n.pullTimeout())
			}
		}
		pushed = r
	}
}

// header is the first item of every push: the sender's name.
func (n *Node) header() peer.Item { return peer.Item{Value: []byte(n.name)} }

// pushMoved gives up the keys that another member owns in r and pushes
// their states to it: the keys of the arcs this node lost since the last
// push, and the stray keys (see moves); every key after the first ring, or
// if those outgrew their bounds.
func (n *Node) pushMoved(r *ring.Ring) {
	byOwner := map[string][]string{}
	add := func(key string, _ local.State) bool {
		if o := r.Owner(key); o != n.name && o != "" {
			byOwner[o] = append(byOwner[o], key) // (a key of several indexes comes once each: the second Take finds nothing)
		}
		return true
	}
	arcs, strays, all := n.moves.take()
	if all {
		n.local.Range(add)
	} else {
		if len(arcs) > 0 {
			n.local.RangeArcs(arcs, add)
		}
		for key := range strays {
			if n.local.Has(key) {
				add(key, local.State{})
			}
		}
	}
	for owner, keys := range byOwner {
		if n.peers.get(owner) == nil {
			for _, k := range keys { // not reachable yet: the next push tries again
				n.moves.stray(k)
			}
			continue
		}
		for len(keys) > 0 {
			if n.holders.leaving.Load() != nil {
				return // Close hands everything off
			}
			var undo []given
			keys, undo = n.pushBatch(owner, keys)
			n.takeBack(owner, undo)
		}
	}
}

// given is a state this node gave up in a push, with the mark it left.
type given struct {
	key     string
	st      local.State
	m       *mark
	refused bool // the target answered that it installed nothing
}

// pushBatch gives up the states of keys to the member named to, until a
// batch is full, and sends the batch (with no lock held). It returns the
// keys left, and the states given up that could not be delivered.
func (n *Node) pushBatch(to string, keys []string) (left []string, failed []given) {
	var done []given
	items := []peer.Item{n.header()}
	size, now, addr := 0, n.nowMs(), n.addrOf(to)
	n.holders.moving.Add(1) // until the marks are set (see holders.quiet)
	for len(keys) > 0 && size < batchBytes {
		key := keys[0]
		keys = keys[1:]
		s := n.holders.lock(key)
		if m := s.get(key); m != nil && m.to != n.name {
			s.unlock() // a pull took it meanwhile
			continue
		}
		st, ok := n.local.Take(key)
		if !ok {
			s.unlock()
			continue
		}
		m := &mark{to: to, addr: addr, at: now, st: &st}
		v := encodeState(st)
		tooLarge := 6+len(key)+len(v) > peer.MaxStatesBody-4
		if tooLarge {
			m.st = nil // too large to hand off: the new owner loads it, or starts afresh
		}
		n.holders.drop(s, key)
		n.holders.set(s, key, m)
		s.unlock()
		if tooLarge { // (m.st is the stripe's now: a pull may take it)
			continue
		}
		done = append(done, given{key: key, st: st, m: m})
		items = append(items, peer.Item{Key: key, Value: v})
		size += 6 + len(key) + len(v)
	}
	n.holders.moving.Add(-1)
	if len(done) == 0 {
		return keys, nil
	}
	if err := n.send(to, items); err != nil {
		n.warn.Warn("hand-off push failed", "node: hand-off push failed", "node", n.name, "to", to, "keys", len(done), "err", err)
		n.stats.handoffFailures.Add(uint64(len(done)))
		if errors.Is(err, errRefused) {
			for i := range done {
				done[i].refused = true
			}
		}
		return keys, done
	}
	n.stats.handedOff.Add(uint64(len(done)))
	for _, g := range done {
		s := n.holders.lock(g.key)
		if s.get(g.key) == g.m {
			g.m.st = nil // confirmed: to holds it
		}
		s.unlock()
	}
	return keys, nil
}

// send delivers items to the member named to and waits for its answer. A
// push whose answer was lost may have been installed: the states stay given
// (two holders would both admit), and installing is idempotent (a key that
// holds a state keeps it), so it tries again, on a fresh connection if the
// old one was dropped. The target may leave between attempts.
func (n *Node) send(to string, items []peer.Item) error {
	var err error
	for range 3 {
		pc := n.peers.get(to)
		if pc == nil {
			return errors.Join(err, errPeerGone)
		}
		var res peer.Result
		res, err = pc.bulk.DoTimeout(context.Background(), &peer.Request{Op: peer.OpStates, States: items}, n.pushTimeout())
		if err == nil && res.Err == nil {
			return nil
		}
		if err == nil {
			// It answered, and installed nothing (it is leaving).
			return fmt.Errorf("%w: %w", errRefused, res.Err)
		}
	}
	return err
}

// takeBack handles the states of a join push that could not be delivered.
// If their target is still in the ring and did not refuse them it may hold
// them: the marks stay (it can pull the copies), and the store gets a copy
// for it to load. Else the states come back here.
func (n *Node) takeBack(to string, failed []given) {
	if len(failed) == 0 {
		return
	}
	if !failed[0].refused && n.members.Ring().Contains(to) {
		if n.states != nil {
			n.writeLost(failed)
		}
		return
	}
	for _, g := range failed {
		s := n.holders.lock(g.key)
		if s.get(g.key) == g.m {
			// The state first, then the mark: with no mark left, a
			// decision could start the key afresh (see holders.quiet).
			n.local.Import(g.key, g.st)
			n.holders.drop(s, g.key)
			n.recordStray(n.members.Ring(), g.key) // the next push tries again
		}
		s.unlock()
	}
}

// writeLost writes states that could not be handed off to the store.
func (n *Node) writeLost(lost []given) {
	if n.states == nil || len(lost) == 0 {
		return
	}
	now := n.nowMs()
	ks := make([]remote.KeyState, len(lost))
	for i, g := range lost {
		ks[i] = remote.KeyState{Key: g.key, State: g.st, TTL: ringlimit.Millis(g.st.Until - now)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(n.cfg.StoreTimeout, time.Second))
	defer cancel()
	if n.states.WriteStates(ctx, ks) == nil {
		n.stats.writes.Add(uint64(len(ks)))
	}
}

func (n *Node) pushTimeout() time.Duration { return max(40*n.cfg.ForwardTimeout, 2*time.Second) }

// handOffAll is the first step of Close: every key is redirected from now
// on, and every state goes to its owner in the ring without this node. The
// states that cannot be delivered are written to the store, if there is one.
func (n *Node) handOffAll() {
	lr := ringWithout(n.members.Ring(), n.name)
	n.holders.leaving.Store(lr)
	// A call that read no leaving ring under a stripe's lock has finished
	// when this takes the lock: Range below sees every state.
	for i := range n.holders.stripes {
		n.holders.stripes[i].mu.Lock()
		n.holders.stripes[i].mu.Unlock()
	}
	if lr.Len() == 0 {
		return
	}
	byOwner := map[string][]string{}
	n.local.Range(func(key string, _ local.State) bool {
		o := lr.Owner(key)
		byOwner[o] = append(byOwner[o], key)
		return true
	})
	var lost []given
	for owner, keys := range byOwner {
		for len(keys) > 0 {
			var failed []given
			keys, failed = n.pushBatch(owner, keys)
			lost = append(lost, failed...)
		}
	}
	n.writeLost(lost)
}
