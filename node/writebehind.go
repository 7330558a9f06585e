package node

import (
	"context"
	"errors"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/remote"
)

// stateStore is what the write-behind and the load on ownership gain need
// from the central store. remote.Connector implements it; a Config.Store
// that implements it is used the same way.
type stateStore interface {
	// WriteStates writes states, each fenced by its version (KeyState.Ver):
	// a write not newer than the stored version is dropped.
	WriteStates(ctx context.Context, states []remote.KeyState) error
	// ClaimState loads key's state and claims the key in one step, unless
	// another member's claim stands (remote.Connector.ClaimState).
	ClaimState(ctx context.Context, key string, c remote.Claim) (remote.Loaded, error)
}

var _ stateStore = (*remote.Connector)(nil)

// run is the node's housekeeping goroutine: every tick it writes the states
// changed since the last tick to the store (write-behind), and every second
// it lets the ownership core drop what expired.
//
// The write-behind never blocks a decision: decisions only set a mark in
// their entry (local.Config.TrackChanges), and this goroutine drains the
// marks. While the store is slow or down the states wait in a queue of at
// most WriteBehindQueue; beyond it the oldest are dropped and counted. The
// writes go through the store's breaker (failover.Limiter.Guard): their
// failures open it, and while it is open only its probes write.
func (n *Node) run() {
	defer n.wg.Done()
	every := n.cfg.WriteBehind
	if every <= 0 {
		every = 100 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var queue []remote.KeyState
	lastTick := time.Now()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		if time.Since(lastTick) >= time.Second {
			lastTick = time.Now()
			n.tick() // the core drops what expired (it visits every mark)
		}
		n.warn.Flush(false) // summaries of repeated warnings whose interval is over
		n.sweepLeases()
		n.retryDone()
		n.maybeSettle()
		if n.states == nil || n.cfg.WriteBehind < 0 || n.closed.Load() {
			continue
		}
		queue = n.writeBehind(queue)
		n.obs.queue.Store(int64(len(queue)))
	}
}

// writeBehind drains the changed states into queue and writes the queue in
// one pipelined round trip. It returns what is left to write.
func (n *Node) writeBehind(queue []remote.KeyState) []remote.KeyState {
	now := n.nowMs()
	// Under the core's lock: a state's version is the one it has when it
	// is drained, and no hand-over changes it meanwhile.
	n.own.mu.Lock()
	n.local.Drain(func(key string, s memstore.State) {
		ks := remote.KeyState{Key: key, State: s, TTL: ringlimit.Millis(s.Until - now)}
		setVersion(&ks, n.own.writeVer(key))
		queue = append(queue, ks)
	})
	n.own.mu.Unlock()
	if over := len(queue) - n.cfg.WriteBehindQueue; over > 0 {
		n.stats.drops.Add(uint64(over))
		queue = append(queue[:0], queue[over:]...)
	}
	if len(queue) == 0 {
		return queue
	}
	// Through the store's breaker: its state shows a store that is down
	// even when only the write-behind touches it, and while it is open the
	// states wait without a write (one goes through as its probe).
	err := n.store.Guard(context.Background(), max(n.cfg.StoreTimeout, n.cfg.WriteBehind), func(ctx context.Context) error {
		return n.states.WriteStates(ctx, queue)
	})
	if errors.Is(err, failover.ErrOpen) {
		return queue
	}
	if err != nil {
		n.stats.writeFailures.Add(1)
		n.warn.Warn("write-behind failed", "node: write-behind to the store failed; the states stay queued",
			"node", n.name, "queued", len(queue), "err", err)
		return queue
	}
	n.stats.writes.Add(uint64(len(queue)))
	clear(queue)
	return queue[:0]
}
