package node

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/ring"
)

// peerConn is the way to one peer: a multiplexed connection behind a
// breaker, so a dead peer costs its callers nothing after a few failures.
type peerConn struct {
	name    string
	addr    string
	client  *forwarder   // forwarded calls
	bulk    *peer.Client // hand-off pushes and pulls, apart so that a pull never waits behind a push on one connection
	breaker peerBreaker
}

// forwarder is the connection for forwarded calls: each waits the timeout
// the peer's latencies call for (an RTO under ForwardTimeout), and a call
// during which this node was descheduled waits that time more (the
// client's Extend). It tells the breaker which failures are evidence.
type forwarder struct {
	*peer.Client
	rto *failover.RTO
	lag *failover.Lag
	// evidence counts the calls that failed on a refused, reset or broken
	// connection (not a timeout, not the caller's context).
	evidence atomic.Uint64
	// refused, if not nil, is told of each: the membership then checks
	// whether the peer's process is gone (ring.Membership.Refused).
	refused func()
}

// Do sends r and waits for its result at most the peer's effective timeout
// (or the context's end, if sooner).
func (f *forwarder) Do(ctx context.Context, r *peer.Request) (peer.Result, error) {
	start := time.Now()
	res, err := f.Client.DoSince(ctx, r, start, f.rto.Timeout(f.lag.Recent(start)))
	switch {
	case err == nil:
		rtt := time.Since(start) // (the monotonic clock alone)
		f.rto.Observe(rtt - f.lag.StalledSince(start, start.Add(rtt)))
	case errors.Is(err, peer.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		f.rto.TimedOut() // no answer in time (a dial or handshake too): not evidence
	case ctx.Err() == nil:
		f.evidence.Add(1)
		if f.refused != nil && !errors.Is(err, peer.ErrClosed) {
			f.refused()
		}
	}
	return res, err
}

// timeout is the peer's effective timeout now.
func (f *forwarder) timeout() time.Duration { return f.rto.Timeout(f.lag.Recent(time.Now())) }

// peerBreaker is the breaker in front of a peer. The chain reports every
// forward that got no answer as a Failure; it passes on as a Failure only a
// call during which the connection failed (evidence), and as a Timeout any
// other, which opens the breaker only in a run that lasts MinSpan.
type peerBreaker struct {
	*failover.Breaker
	fw *forwarder
}

// Allow is failover.Breaker.Allow, with Failures that saw no evidence
// reported as Timeouts (peerPass.Done). It allocates nothing while the
// breaker is healthy.
func (b peerBreaker) Allow() (peerPass, error) {
	before := b.fw.evidence.Load()
	done, err := b.Breaker.Allow()
	if err != nil {
		return peerPass{}, err
	}
	return peerPass{done: done, fw: b.fw, before: before}, nil
}

// peerPass is a call a peerBreaker let through.
type peerPass struct {
	done   func(failover.Outcome)
	fw     *forwarder
	before uint64 // the forwarder's evidence when the call began
}

// Done reports the call's outcome: a Failure during which the connection
// did not fail goes on as a Timeout.
func (p peerPass) Done(o failover.Outcome) {
	if o == failover.Failure && p.fw.evidence.Load() == p.before {
		o = failover.Timeout
	}
	p.done(o)
}

// peerTable maps member names to their connections. Lookups read an
// immutable map through an atomic pointer; changes copy it under a mutex.
type peerTable struct {
	n   *Node
	lag *failover.Lag // this node's scheduling lag (store.go runs it)
	mu  sync.Mutex
	m   atomic.Pointer[map[string]*peerConn]
	off bool // closed: no new connections

	rejectedGone atomic.Uint64 // frames rejected by clients closed since
}

// rejected counts the frames this node's clients rejected.
func (t *peerTable) rejected() uint64 {
	n := t.rejectedGone.Load()
	for _, pc := range *t.m.Load() {
		n += pc.client.Stats().RejectedFrames + pc.bulk.Stats().RejectedFrames
	}
	return n
}

// closeConn closes pc's clients and keeps their counts.
func (t *peerTable) closeConn(pc *peerConn) {
	pc.client.Close()
	pc.bulk.Close()
	t.rejectedGone.Add(pc.client.Stats().RejectedFrames + pc.bulk.Stats().RejectedFrames)
}

func (t *peerTable) init(n *Node) {
	t.n = n
	t.m.Store(&map[string]*peerConn{})
}

// get returns the connection to the member named name, making it on first
// use; nil if the member's address is unknown or the node is closing.
func (t *peerTable) get(name string) *peerConn {
	if pc := (*t.m.Load())[name]; pc != nil {
		return pc
	}
	addr, ok := t.n.members.RPCAddr(name)
	if !ok {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.m.Load()
	if pc := old[name]; pc != nil {
		return pc
	}
	if t.off {
		return nil
	}
	pc := t.dial(name, addr)
	next := make(map[string]*peerConn, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[name] = pc
	t.m.Store(&next)
	return pc
}

// current is the connection in the table for name, without dialling.
func (t *peerTable) current(name string) *peerConn { return (*t.m.Load())[name] }

func (t *peerTable) dial(name, addr string) *peerConn {
	cfg := t.n.cfg
	cc := peer.ClientConfig{Addr: addr, Name: name, Secret: cfg.SecretKey, Timeout: cfg.ForwardTimeout, Extend: t.lag.Extend}
	if nw := cfg.Network; nw != nil {
		from := t.n.name
		cc.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return nw.DialPeer(ctx, from, name, addr) }
	}
	// A forwarded call may wait on the owner's pull of the key's state
	// while ownership changes (at most ForwardTimeout/3, then the owner
	// answers "ask again": route.go's parkTimeout): a caller that gave up
	// sooner would send the call on to the store while the owner still
	// decides it. So the floor is half the ceiling.
	fw := &forwarder{Client: peer.NewClient(cc), rto: failover.NewRTO(max(failover.DefaultFloor, cfg.ForwardTimeout/2), cfg.ForwardTimeout), lag: t.lag}
	fw.refused = func() { t.n.members.Refused(name) }
	return &peerConn{
		name:   name,
		addr:   addr,
		client: fw,
		bulk:   peer.NewClient(cc),
		breaker: peerBreaker{failover.NewBreaker(failover.BreakerConfig{
			Name:        "peer " + name,
			MaxFailures: 3,
			Cooldown:    500 * time.Millisecond,
			Logger:      cfg.Logger,
		}), fw},
	}
}

// update drops the connections of members that left, or whose address
// changed. It runs on the membership's goroutine after each change.
func (t *peerTable) update(ev ring.Event) {
	t.mu.Lock()
	old := *t.m.Load()
	next := make(map[string]*peerConn, len(old))
	var gone []*peerConn
	for name, pc := range old {
		if addr, ok := ev.Addrs[name]; ok && addr == pc.addr && ev.Ring.Contains(name) {
			next[name] = pc
		} else {
			gone = append(gone, pc)
		}
	}
	t.m.Store(&next)
	t.mu.Unlock()
	for _, pc := range gone {
		t.closeConn(pc)
	}
	addrs := make([]string, 0, ev.Ring.Len()) // the members' addresses keep their handshake slots
	for _, name := range ev.Ring.Members() {
		if addr, ok := ev.Addrs[name]; ok {
			addrs = append(addrs, addr)
		}
	}
	t.n.memberIPs.Set(addrs)
	t.n.ringChanged(ev.Ring, ev.Incs)
	if len(ev.Joined)+len(ev.Left) > 0 {
		t.n.cfg.Logger.Info("node: membership changed", "node", t.n.name,
			"joined", ev.Joined, "left", ev.Left, "members", ev.Ring.Len())
	}
}

// closeAll closes every connection; no new ones are made.
func (t *peerTable) closeAll() {
	t.mu.Lock()
	t.off = true
	old := *t.m.Load()
	t.m.Store(&map[string]*peerConn{})
	t.mu.Unlock()
	for _, pc := range old {
		t.closeConn(pc)
	}
}

// states reports each peer's breaker state.
func (t *peerTable) states() map[string]failover.State {
	out := map[string]failover.State{}
	for name, pc := range *t.m.Load() {
		out[name] = pc.breaker.State()
	}
	return out
}

// stalled is how long this node was descheduled at a stretch lately: the
// ring holds a member declared failed twice that long (ring.Config.Stalled).
func (t *peerTable) stalled() time.Duration { return t.lag.Recent(time.Now()) }

// timeouts reports each peer's effective forward timeout: every member's
// but this node's (ForwardTimeout, the ceiling, for one not dialled yet),
// and any connection's that outlives its membership.
func (t *peerTable) timeouts() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, name := range t.n.members.Ring().Members() {
		if name != t.n.name {
			out[name] = t.n.cfg.ForwardTimeout
		}
	}
	for name, pc := range *t.m.Load() {
		out[name] = pc.client.timeout()
	}
	return out
}

// Quick reports whether r is answered from memory at once: a plain call
// while no key changes hands (owner.fresh), or for a key whose state is
// here. Hand-off steps, redirected calls, calls that may first fetch a
// key's state, and resets (which wait for the key's leases to be revoked)
// are served on a worker of the connection, so they delay no other call
// on it.
func (h ownerHandler) Quick(r *peer.Request) bool {
	if (r.Op != peer.OpAllow && r.Op != peer.OpAllowAll) || r.From != "" {
		return false
	}
	n := h.n
	return n.own.fresh() || n.local.Has(r.Key)
}

var _ peer.Quick = ownerHandler{}
