package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrTimeout is returned when the owner did not answer within the timeout.
var ErrTimeout = errors.New("peer: timed out")

// ErrClosed is returned by a closed Client.
var ErrClosed = errors.New("peer: client closed")

// ClientConfig configures a Client.
type ClientConfig struct {
	Addr   string // the peer's RPC address
	Name   string // the peer's node name; if not empty, a server with another name is refused
	Secret []byte // the cluster's secret; empty: no authentication, frames in clear (demos)
	// Timeout bounds each call, and the dial and handshake. If zero, 50 ms.
	Timeout time.Duration
	// IdleTimeout closes the connection when no call was made on it for
	// about that long (between one and one and a half times it); the next
	// call dials again. If zero, 1 min: less than a Server's default, so
	// the client, not the server, closes an idle connection.
	IdleTimeout time.Duration
	// Dial dials the peer. If nil, net.Dialer.DialContext over TCP. Tests use
	// it to put a fault-injecting network in between.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Extend, if not nil, is asked when a call's timer fires at now (the
	// call began at start, with timeout, due at due) and returns how much
	// longer it may wait, for the time this process spent descheduled
	// meanwhile (failover.Lag.Extend); 0 times the call out. If nil, none.
	Extend func(start, due, now time.Time, timeout time.Duration) time.Duration
}

// Client is a connection to one peer that carries many calls at once. Calls
// write their frames themselves, and whoever finds no write in progress
// writes everything queued so far (batching by opportunity: no writer
// goroutine hand-off at low load). A call made while an earlier write's
// answers are due is held for them instead (see defaultHold), and goes out
// with every call held meanwhile in one write. One goroutine per
// connection reads the answers and hands each to its caller.
// A broken connection fails the calls in flight and is dialled again by the
// next call.
//
// Client is safe for simultaneous use by multiple goroutines.
type Client struct {
	cfg ClientConfig

	mu     sync.Mutex // guards cn, closed
	cn     *conn
	closed bool
	dialMu sync.Mutex // one dial at a time
	wg     sync.WaitGroup
	calls  sync.Pool

	rejected atomic.Uint64
	hold     time.Duration // defaultHold; tests change it before the first call
	held     atomic.Uint64 // calls held for earlier answers (tests)
}

// ClientStats are a Client's counters.
type ClientStats struct {
	// RejectedFrames counts records from the server that failed to open
	// (modified, replayed, dropped before, reordered) or to parse; each
	// closed the connection and failed the calls in flight on it.
	RejectedFrames uint64
}

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats { return ClientStats{RejectedFrames: c.rejected.Load()} }

// NewClient returns a Client for cfg.Addr. It dials on first use.
func NewClient(cfg ClientConfig) *Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 50 * time.Millisecond
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = time.Minute
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	c := &Client{cfg: cfg, hold: defaultHold}
	c.calls.New = func() any { return &call{ch: make(chan Result, 1), timer: stoppedTimer()} }
	return c
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

type call struct {
	ch    chan Result
	timer *time.Timer
	flush bool // set with the last answer of a read: write the calls held
}

type conn struct {
	nc net.Conn
	wr writer
	rd reader

	pmu     sync.Mutex
	nextID  uint64
	seenID  uint64 // nextID at the last idle check
	pending map[uint64]*call
	err     error // set once the connection broke
	idle    *time.Timer
	quiet   int // idle checks in a row that found no call

	// waiting is the calls registered and not yet answered, failed or
	// abandoned: those written, and those about to be.
	waiting atomic.Int32
	// holding is set (under wr.mu) while calls are held; heldT then writes
	// them if the answers they wait for are late.
	holding atomic.Bool
	heldT   *time.Timer
	hold    time.Duration
}

// defaultHold bounds how long a call waits, unwritten, for the answers of
// earlier writes on its connection. A call made while answers are due on
// its connection (holdMin calls or more are unanswered, and the last write
// began less than the hold ago) is not written at once: the caller of the last answer the
// reader finds arrived writes it with every other call held meanwhile (not
// the reader, which must keep reading whatever a write waits for), or a
// timer does after the hold. With many callers a connection's calls then
// go out one write per round trip instead of one write each, and on
// loopback a write costs the caller its peer's receive path and wake-up
// too (bench's TestForwardCost). A lone caller never waits: nothing of its
// connection is unanswered when it calls. A slow answer (a hand-off pull
// on the owner) delays the calls held behind it by at most the hold.
const defaultHold = time.Millisecond

// Do sends r and waits for its result, at most the Timeout (or the
// context's end, if sooner).
func (c *Client) Do(ctx context.Context, r *Request) (Result, error) {
	return c.DoTimeout(ctx, r, c.cfg.Timeout)
}

// DoTimeout is Do with another timeout than the Client's, for requests that
// carry more than a decision (a hand-off batch).
func (c *Client) DoTimeout(ctx context.Context, r *Request, timeout time.Duration) (Result, error) {
	start := time.Now()
	cl := c.calls.Get().(*call)
	var cn *conn
	var id uint64
	for {
		var err error
		if cn, err = c.conn(ctx, start.Add(c.cfg.Timeout)); err == nil {
			id, err = cn.register(cl)
		}
		if errors.Is(err, errIdle) {
			// Closed for idleness just now: forget it and dial again.
			c.mu.Lock()
			if c.cn == cn {
				c.cn = nil
			}
			c.mu.Unlock()
			continue
		}
		if err != nil {
			c.calls.Put(cl)
			return Result{}, err
		}
		break
	}
	// The request gets its timeout once its connection is ready: a call
	// that had to dial a slow peer (the handshake is a few round trips)
	// is not given up on for the dial alone. The whole call stays within
	// the Client's Timeout (the ceiling), or timeout if that is longer.
	ready := time.Now()
	due := ready.Add(timeout)
	if limit := start.Add(max(timeout, c.cfg.Timeout)); due.After(limit) {
		due = limit
	}
	cl.timer.Reset(time.Until(due))
	if now := time.Now(); now.After(due) {
		due = now // the dial took the ceiling: the timer fires now, not late
	}
	cn.write(c, r, id, start)
	var err error
wait:
	select {
	case res := <-cl.ch:
		cl.timer.Stop()
		if cl.flush {
			cl.flush = false
			cn.flushHeld(c)
		}
		c.calls.Put(cl)
		if res.Err != nil && errors.Is(res.Err, errBroken) {
			return Result{}, res.Err
		}
		return res, nil
	case <-cl.timer.C:
		if c.cfg.Extend != nil {
			now := time.Now()
			if more := c.cfg.Extend(start, due, now, timeout); more > 0 {
				due = now.Add(more)
				cl.timer.Reset(more)
				goto wait
			}
		}
		err = fmt.Errorf("%w after %s", ErrTimeout, timeout)
	case <-ctx.Done():
		cl.timer.Stop()
		err = ctx.Err()
	}
	// Abandoned: if the answer comes now, the reader drops it; if it came
	// just before, drain it so the pooled call starts empty.
	if !cn.unregister(id) {
		<-cl.ch
		if cl.flush {
			cl.flush = false
			cn.flushHeld(c)
		}
	}
	c.calls.Put(cl)
	return Result{}, err
}

var errBroken = errors.New("peer: connection broken")

// conn returns the live connection, dialling one if needed.
func (c *Client) conn(ctx context.Context, deadline time.Time) (*conn, error) {
	c.mu.Lock()
	cn, closed := c.cn, c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if cn != nil {
		return cn, nil
	}
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	c.mu.Lock()
	cn, closed = c.cn, c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if cn != nil {
		return cn, nil
	}
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := c.cfg.Dial(dctx, c.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("peer: dial %s: %w", c.cfg.Addr, err)
	}
	tx, rx, err := clientHandshake(nc, c.cfg.Secret, c.cfg.Name, time.Until(deadline))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("peer: %s: %w", c.cfg.Addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	cn = &conn{nc: nc, pending: map[uint64]*call{}}
	cn.wr.seal = tx
	cn.hold = c.hold
	cn.heldT = time.AfterFunc(time.Hour, func() { cn.flushHeld(c) })
	cn.heldT.Stop()
	cn.wr.hold = cn.holdFor
	// No read deadlines while calls are in flight: a test's fault network
	// may delay what it carries. Idleness is the idle timer's to notice; it
	// wakes the reader with a deadline to drop its buffer.
	cn.rd = reader{c: nc, open: rx, wake: true}
	step := min(time.Second, c.cfg.IdleTimeout/2)
	cn.pmu.Lock() // the timer's function reads cn.idle under it
	cn.idle = time.AfterFunc(step, func() { cn.checkIdle(step, c.cfg.IdleTimeout) })
	cn.pmu.Unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cn.idle.Stop()
		nc.Close()
		return nil, ErrClosed
	}
	c.cn = cn
	c.wg.Add(1)
	c.mu.Unlock()
	go c.read(cn)
	return cn, nil
}

func (cn *conn) register(cl *call) (uint64, error) {
	cn.pmu.Lock()
	defer cn.pmu.Unlock()
	if cn.err != nil {
		return 0, cn.err
	}
	cn.nextID++
	cn.pending[cn.nextID] = cl
	cn.waiting.Add(1)
	return cn.nextID, nil
}

// checkIdle runs every step. A connection on which no call was made since
// the last check, with none in flight, drops its write buffers; after
// timeout of that it is closed.
func (cn *conn) checkIdle(step, timeout time.Duration) {
	cn.pmu.Lock()
	defer cn.pmu.Unlock()
	if cn.err != nil {
		return
	}
	if cn.nextID != cn.seenID || len(cn.pending) > 0 {
		cn.seenID, cn.quiet = cn.nextID, 0
		cn.idle.Reset(step)
		return
	}
	cn.quiet++
	if cn.quiet == 1 {
		cn.wr.release()
		_ = cn.nc.SetReadDeadline(time.Now()) // the reader drops its buffer
	}
	if time.Duration(cn.quiet)*step < timeout {
		cn.idle.Reset(step)
		return
	}
	cn.err = errIdle // calls that find it dial again
	cn.nc.Close()
}

// unregister removes id; false if the reader already took it.
func (cn *conn) unregister(id uint64) bool {
	cn.pmu.Lock()
	defer cn.pmu.Unlock()
	if _, ok := cn.pending[id]; !ok {
		return false
	}
	delete(cn.pending, id)
	cn.waiting.Add(-1)
	return true
}

// write queues r's frame and, unless a write is in progress or answers are
// due (see defaultHold), writes everything queued. now is about the time.
func (cn *conn) write(c *Client, r *Request, id uint64, now time.Time) {
	cn.wr.mu.Lock()
	st := cn.wr.begin()
	cn.wr.buf = appendRequest(cn.wr.buf, id, r)
	cn.wr.end(st)
	// More calls waiting than queued: an earlier write is unanswered (or
	// a call is about to queue, and will decide for itself).
	if !cn.wr.flushing && now.Sub(cn.wr.last) < c.hold && cn.holdFor() {
		c.held.Add(1)
		cn.wr.mu.Unlock()
		return
	}
	cn.flushLocked(c)
}

// holdFor reports whether the calls queued wait for answers due (at least
// holdMin more calls are waiting than queued: earlier writes are
// unanswered), and if so arms the timer that writes them if the answers
// are late. Called with wr.mu held.
func (cn *conn) holdFor() bool {
	if int(cn.waiting.Load())-cn.wr.frames < holdMin {
		return false
	}
	if !cn.holding.Load() {
		cn.holding.Store(true)
		cn.heldT.Reset(cn.hold)
	}
	return true
}

// holdMin is the calls a connection must have in flight for a new one to
// be held for their answers. With fewer, few calls join the held ones
// before the answers come (most are the callers of those answers, which
// call again only after them), and the wait costs more than the writes it
// saves: with 32 callers spread over 15 peers, holding for one or two
// calls cost the caller more CPU per decision than it saved (bench's
// TestForwardCost).
const holdMin = 4

// flushHeld writes the calls held, if any: a caller calls it when it got
// its answer, the timer when the answers are late.
func (cn *conn) flushHeld(c *Client) {
	cn.wr.mu.Lock()
	if cn.wr.frames == 0 || cn.wr.flushing {
		cn.wr.mu.Unlock()
		return
	}
	cn.flushLocked(c)
}

// flushLocked writes what is queued, but for what arrives during the write
// while answers are due; called with wr.mu held, it releases it.
func (cn *conn) flushLocked(c *Client) {
	if cn.holding.Load() {
		cn.holding.Store(false)
		cn.heldT.Stop()
	}
	if err := cn.wr.flush(cn.nc, c.cfg.Timeout); err != nil {
		cn.nc.Close() // the reader sees it and fails the calls in flight
	}
}

// read hands each result to its caller until the connection breaks, then
// fails the calls still in flight and forgets the connection.
func (c *Client) read(cn *conn) {
	defer c.wg.Done()
	var err error
	for {
		var typ byte
		var id uint64
		var body []byte
		if typ, id, body, err = cn.rd.next(); err != nil {
			break
		}
		if typ != typeResult {
			err = fmt.Errorf("%w: type %d from a server", ErrMalformed, typ)
			break
		}
		var res Result
		if res, err = parseResult(body); err != nil {
			break
		}
		cn.pmu.Lock()
		cl := cn.pending[id]
		if cl != nil {
			delete(cn.pending, id)
			cn.waiting.Add(-1)
		}
		cn.pmu.Unlock()
		last := !cn.rd.buffered() // the last answer that arrived
		if cl != nil {
			cl.flush = last // its caller writes the calls held for these answers
			cl.ch <- res
		} else if last && cn.holding.Load() {
			cn.heldT.Reset(0) // nobody waits for this answer: the timer writes them
		}
	}
	cn.nc.Close()
	cn.idle.Stop()
	cn.wr.mu.Lock()
	cn.holding.Store(false)
	cn.heldT.Stop()
	cn.wr.mu.Unlock()
	if errors.Is(err, ErrSealed) || errors.Is(err, ErrMalformed) {
		c.rejected.Add(1)
	}
	c.mu.Lock()
	if c.cn == cn {
		c.cn = nil
	}
	c.mu.Unlock()
	broken := fmt.Errorf("%w: %s: %w", errBroken, c.cfg.Addr, err)
	cn.pmu.Lock()
	if cn.err == nil {
		cn.err = broken
	}
	for id, cl := range cn.pending {
		delete(cn.pending, id)
		cn.waiting.Add(-1)
		cl.ch <- Result{Err: broken}
	}
	cn.pmu.Unlock()
}

// Close closes the connection and waits for its reader. Calls in flight
// fail. Idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	cn := c.cn
	c.mu.Unlock()
	if cn != nil {
		cn.nc.Close()
	}
	c.wg.Wait()
	return nil
}

// quietFor is the idle checks in a row that found no call (tests).
func (c *Client) quietFor() int {
	c.mu.Lock()
	cn := c.cn
	c.mu.Unlock()
	if cn == nil {
		return 0
	}
	cn.pmu.Lock()
	defer cn.pmu.Unlock()
	return cn.quiet
}
