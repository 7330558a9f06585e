package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
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
// write their frames themselves: whoever finds no write in progress writes
// everything queued so far, and a call made during a write goes out with
// the next (batching by opportunity: nobody waits for anything but the
// write in progress). Calls read the answers themselves too, one at a
// time: a call that finds nobody reading reads, hands each answer it finds
// to its caller, and once it has its own (and every answer already
// buffered) passes the reading on to a call still waiting, if any. A lone
// call so writes its frame and reads its answer on its own goroutine, as a
// plain request and response would; with many, each answer wakes the call
// it answers. A broken connection fails the calls in flight and is dialled
// again by the next call.
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
	version  byte // the highest version spoken (tests lower it)
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
	c := &Client{cfg: cfg, version: Version}
	c.calls.New = func() any { return &call{ch: make(chan wake, 1), timer: stoppedTimer()} }
	return c
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// call is one call in flight. Its channel gets at most one wake while the
// call is registered: its answer, or the turn to read.
type call struct {
	id    uint64
	ch    chan wake
	res   Result // the answer, set before wakeAnswer is sent
	timer *time.Timer
}

type wake uint8

const (
	wakeAnswer wake = iota + 1 // res holds the answer, or the connection's failure
	wakeTurn                   // the call now reads for the connection
)

type conn struct {
	nc  net.Conn
	raw syscall.RawConn // nil if nc is not a socket of this process's own
	wr  writer
	rd  reader // read only by the call that holds the turn (reader)
	// rdl is the read deadline set last (by a turn, or the probe); an
	// interruption sets one before it without saying so.
	rdl time.Time

	pmu     sync.Mutex
	nextID  uint64
	seenID  uint64 // nextID at the last idle check
	pending map[uint64]*call
	reader  *call     // the call whose turn it is to read; nil: nobody reads
	read    time.Time // when the last turn ended
	err     error     // set once the connection broke
	idle    *time.Timer
	quiet   int // idle checks in a row that found no call

	interrupt func() // wakes the reader (a context ended): a read deadline now

	kick  chan struct{} // frames queued for the writer
	ended chan struct{} // closed when the connection ends: the writer leaves
}

// Do sends r and waits for its result, at most the Timeout (or the
// context's end, if sooner).
func (c *Client) Do(ctx context.Context, r *Request) (Result, error) {
	return c.DoTimeout(ctx, r, c.cfg.Timeout)
}

// DoTimeout is Do with another timeout than the Client's, for requests that
// carry more than a decision (a hand-off batch).
func (c *Client) DoTimeout(ctx context.Context, r *Request, timeout time.Duration) (Result, error) {
	return c.DoSince(ctx, r, time.Now(), timeout)
}

// DoSince is DoTimeout for a call its caller began at start (a reading of
// the clock taken just now, which the call then need not take again).
func (c *Client) DoSince(ctx context.Context, r *Request, start time.Time, timeout time.Duration) (Result, error) {
	cl := c.calls.Get().(*call)
	var cn *conn
	ready := start
	alone, retried := false, false
again:
	for {
		var err error
		var dialled bool
		if cn, dialled, err = c.conn(ctx, start.Add(c.cfg.Timeout)); err == nil {
			if dialled {
				ready = time.Now()
			}
			alone, err = cn.register(cl, ready)
		}
		if errors.Is(err, errIdle) {
			// Closed for idleness just now, or found closed by the peer:
			// forget it and dial again.
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
	due := ready.Add(timeout)
	if limit := start.Add(max(timeout, c.cfg.Timeout)); due.After(limit) {
		due = limit
	}
	if ready.After(due) {
		due = ready // the dial took the ceiling: the call times out now, not late
	}
	if cn.write(c, r, cl.id, alone) && !retried {
		// The socket was closed (or reset) before this call's frame
		// left: nothing was sent, so it goes again on a new connection,
		// once. (A lone call's frame is the first write's.)
		cn.abandon(cl)
		cn.end(errIdle)
		c.mu.Lock()
		if c.cn == cn {
			c.cn = nil
		}
		c.mu.Unlock()
		retried = true
		goto again
	}
	res, err := cn.await(c, ctx, cl, start, due, timeout)
	c.calls.Put(cl)
	return res, err
}

var errBroken = errors.New("peer: connection broken")

// conn returns the live connection, dialling one if needed (dialled).
func (c *Client) conn(ctx context.Context, deadline time.Time) (cn *conn, dialled bool, err error) {
	c.mu.Lock()
	cn, closed := c.cn, c.closed
	c.mu.Unlock()
	if closed {
		return nil, false, ErrClosed
	}
	if cn != nil {
		return cn, false, nil
	}
	c.dialMu.Lock()
	defer c.dialMu.Unlock()
	c.mu.Lock()
	cn, closed = c.cn, c.closed
	c.mu.Unlock()
	if closed {
		return nil, false, ErrClosed
	}
	if cn != nil {
		return cn, false, nil
	}
	cn, err = c.dial(ctx, deadline)
	return cn, err == nil, err
}

// dial dials the peer and starts a connection (apart from conn, whose
// fast path so allocates nothing: the idle timer's function holds cn).
func (c *Client) dial(ctx context.Context, deadline time.Time) (*conn, error) {
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := c.cfg.Dial(dctx, c.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("peer: dial %s: %w", c.cfg.Addr, err)
	}
	tx, rx, v, err := clientHandshakeUpTo(nc, c.cfg.Secret, c.cfg.Name, time.Until(deadline), c.version)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("peer: %s: %w", c.cfg.Addr, err)
	}
	cn := &conn{nc: nc, pending: map[uint64]*call{}, read: time.Now()}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		cn.raw, _ = tc.SyscallConn()
	}
	cn.wr.seal, cn.wr.batch = tx, v >= 3
	cn.rd = reader{c: nc, open: rx, yield: true, single: v < 3}
	cn.interrupt = func() { _ = nc.SetReadDeadline(time.Unix(1, 0)) }
	cn.kick, cn.ended = make(chan struct{}, 1), make(chan struct{})
	step := min(time.Second, c.cfg.IdleTimeout/2)
	cn.pmu.Lock() // the timer's function reads cn.idle under it
	cn.idle = time.AfterFunc(step, func() { cn.checkIdle(step, c.cfg.IdleTimeout) })
	cn.pmu.Unlock()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cn.end(ErrClosed)
		return nil, ErrClosed
	}
	c.cn = cn
	c.wg.Add(1)
	c.mu.Unlock()
	go cn.writeLoop(c)
	return cn, nil
}

// probeAfter is how long a connection may go unread before a call checks
// that the peer has not closed it: with no call in flight nobody reads, so
// a peer's close (a restart, its idle timeout) would otherwise be found by
// the next call, which would fail instead of dialling again.
const probeAfter = time.Millisecond

// register adds cl to the calls in flight; alone if it is the only one. A
// connection that nobody has read for probeAfter is first checked (one
// system call that does not wait); errIdle if the peer closed it.
func (cn *conn) register(cl *call, now time.Time) (alone bool, err error) {
	cn.pmu.Lock()
	defer cn.pmu.Unlock()
	if cn.err != nil {
		return false, cn.err
	}
	alone = len(cn.pending) == 0
	if alone && cn.reader == nil && now.Sub(cn.read) > probeAfter && !cn.alive() {
		cn.endLocked(errIdle)
		return false, errIdle
	}
	cn.nextID++
	cl.id = cn.nextID
	cn.pending[cl.id] = cl
	return alone, nil
}

// end ends the connection for good: calls that find it get err (errIdle:
// they dial again), its writer leaves and its socket closes. The call
// reading, if any, then fails the calls in flight. Idempotent.
func (cn *conn) end(err error) {
	cn.pmu.Lock()
	cn.endLocked(err)
	cn.pmu.Unlock()
}

func (cn *conn) endLocked(err error) {
	if cn.err == nil {
		cn.err = err
	}
	cn.stopIdleLocked()
	select {
	case <-cn.ended:
	default:
		close(cn.ended)
	}
	cn.nc.Close()
}

// alive reports whether the peer has not closed the connection, as far as
// the socket tells without waiting: a pending end of stream or error means
// it has; bytes waiting (a late answer) or none mean it has not. A socket
// closed on this side is not alive either. Called with pmu held while
// nobody reads; true if the socket cannot be asked.
func (cn *conn) alive() bool {
	if cn.rd.buffered() {
		return true
	}
	// A turn's deadline, past now, would keep the probe from the socket;
	// and a socket closed here refuses a deadline.
	cn.rdl = time.Time{}
	if err := cn.nc.SetReadDeadline(time.Time{}); err != nil {
		return false
	}
	if cn.raw == nil {
		return true
	}
	var b [1]byte
	ok := true
	if err := cn.raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = n > 0 || err == syscall.EAGAIN || err == syscall.EINTR
		return true
	}); err != nil {
		return false
	}
	return ok
}

// checkIdle runs every step. A connection on which no call was made since
// the last check, with none in flight, drops its buffers; after timeout of
// that it is closed.
func (cn *conn) checkIdle(step, timeout time.Duration) {
	cn.pmu.Lock()
	defer cn.pmu.Unlock()
	if cn.err != nil || cn.idle == nil {
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
		if cn.reader == nil {
			cn.rd.release() // nobody reads: nobody holds the buffer
		}
	}
	if time.Duration(cn.quiet)*step < timeout {
		cn.idle.Reset(step)
		return
	}
	cn.endLocked(errIdle) // calls that find it dial again
}

func (cn *conn) stopIdleLocked() {
	if cn.idle != nil {
		cn.idle.Stop()
		cn.idle = nil
	}
}

// write queues r's frame. A call alone on the connection writes it at
// once, unless a write is in progress (whose writer then writes it too);
// one made while others are in flight leaves the write to the
// connection's writer, so that its caller goes on to wait (or read) while
// the frames of calls made meanwhile queue for the same write. It reports
// whether the call wrote its frame itself and the write failed before
// anything left.
func (cn *conn) write(c *Client, r *Request, id uint64, alone bool) (unsent bool) {
	cn.wr.mu.Lock()
	st := cn.wr.begin()
	cn.wr.buf = appendRequest(cn.wr.buf, id, r)
	cn.wr.end(st)
	if alone || cn.wr.flushing {
		unsent, err := cn.wr.flushUnsent(cn.nc, c.cfg.Timeout)
		if err != nil {
			cn.nc.Close() // the reader sees it and fails the calls in flight
		}
		return unsent
	}
	cn.wr.mu.Unlock()
	select {
	case cn.kick <- struct{}{}:
	default: // kicked already: it writes this frame too
	}
	return false
}

// writeLoop is the connection's writer: each kick, it writes everything
// queued (never waiting for more), until the connection ends.
func (cn *conn) writeLoop(c *Client) {
	defer c.wg.Done()
	for {
		select {
		case <-cn.kick:
		case <-cn.ended:
			return
		}
		// Let the goroutines already runnable run first (callers that
		// got their answers, about to call again), once: their calls
		// then go out in this write. A yield, not a wait: nothing here
		// waits for time, for the peer or for a call to come.
		runtime.Gosched()
		cn.wr.mu.Lock()
		if err := cn.wr.flush(cn.nc, c.cfg.Timeout); err != nil {
			cn.nc.Close() // the reader sees it and fails the calls in flight
		}
	}
}

// await waits for cl's answer until due (or Extend's more) or ctx's end:
// reading for the connection if nobody does, or when handed the turn.
func (cn *conn) await(c *Client, ctx context.Context, cl *call, start, due time.Time, timeout time.Duration) (Result, error) {
	cn.pmu.Lock()
	switch {
	case cn.pending[cl.id] != cl:
		// Answered already (or failed): by a reader that came and went
		// since the write.
		cn.pmu.Unlock()
		<-cl.ch
		return cl.answer()
	case cn.reader == nil:
		cn.reader = cl
		cn.pmu.Unlock()
		return cn.readFor(c, ctx, cl, start, due, timeout)
	}
	cn.pmu.Unlock()
	cl.timer.Reset(time.Until(due))
	var err error
wait:
	select {
	case w := <-cl.ch:
		cl.timer.Stop()
		if w == wakeTurn {
			return cn.readFor(c, ctx, cl, start, due, timeout)
		}
		return cl.answer()
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
	cn.abandon(cl)
	return Result{}, err
}

// answer returns the answer cl was woken with, and empties cl.
func (cl *call) answer() (Result, error) {
	res := cl.res
	cl.res = Result{}
	if res.Err != nil && errors.Is(res.Err, errBroken) {
		return Result{}, res.Err
	}
	return res, nil
}

// abandon forgets cl, which gives up waiting. If its answer came just
// now, it is dropped; if the turn to read did, it goes to another call.
func (cn *conn) abandon(cl *call) {
	cn.pmu.Lock()
	if cn.pending[cl.id] != cl {
		// Answered (or failed) just now: the wake is on its way.
		cn.pmu.Unlock()
		<-cl.ch
		cl.res = Result{}
		return
	}
	delete(cn.pending, cl.id)
	if cn.reader == cl {
		<-cl.ch // the turn, sent as reader was set
		cn.passLocked(time.Now())
	}
	cn.pmu.Unlock()
}

// passLocked ends the current turn to read, at about now: it goes to a
// call in flight, if any. Called with pmu held.
func (cn *conn) passLocked(now time.Time) {
	cn.reader = nil
	for _, w := range cn.pending {
		cn.reader = w
		w.ch <- wakeTurn
		return
	}
	cn.read = now
}

// readFor reads for the connection, as the call whose turn it is, until
// cl's answer and every answer buffered with it are handed out, due
// passes (or Extend's more) or ctx ends; then it passes the turn on. A
// read error breaks the connection and fails every call in flight.
func (cn *conn) readFor(c *Client, ctx context.Context, cl *call, start, due time.Time, timeout time.Duration) (Result, error) {
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, cn.interrupt)
	}
	// A deadline a turn before set, after start and not after due, is
	// kept (it is due's of a call made before): if it passes first, the
	// loop below sets due. So a turn costs no timer.
	if !cn.rdl.After(start) || cn.rdl.After(due) {
		cn.setReadDeadline(due)
	}
	var own Result
	got := false
	var quit, broken error // quit: cl gives up; broken: the connection
	for !got || cn.rd.buffered() {
		id, res, err := cn.readResult()
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				broken = err
				break
			}
			// Our due, our context, or an interruption meant for a turn
			// before ours (its context ended as it passed the turn on).
			if quit = ctx.Err(); quit != nil {
				break
			}
			now := time.Now()
			if now.Before(due) {
				cn.setReadDeadline(due)
				continue
			}
			if c.cfg.Extend != nil {
				if more := c.cfg.Extend(start, due, now, timeout); more > 0 {
					due = now.Add(more)
					cn.setReadDeadline(due)
					continue
				}
			}
			quit = fmt.Errorf("%w after %s", ErrTimeout, timeout)
			break
		}
		cn.pmu.Lock()
		w := cn.pending[id]
		if w != nil {
			delete(cn.pending, id)
		}
		cn.pmu.Unlock()
		switch {
		case w == cl:
			own, got = res, true
		case w != nil:
			w.res = res
			w.ch <- wakeAnswer
		}
	}
	if stop != nil {
		stop()
	}
	if broken != nil {
		err := cn.broke(c, broken)
		if !got {
			return Result{}, err
		}
	} else {
		cn.pmu.Lock()
		if !got {
			delete(cn.pending, cl.id)
		}
		cn.passLocked(start)
		cn.pmu.Unlock()
	}
	if !got {
		return Result{}, quit
	}
	cl.res = own
	return cl.answer()
}

// setReadDeadline sets the read deadline, by the call whose turn it is
// (or with pmu held while nobody reads).
func (cn *conn) setReadDeadline(t time.Time) {
	cn.rdl = t
	_ = cn.nc.SetReadDeadline(t)
}

// readResult reads the next answer and the id of its call.
func (cn *conn) readResult() (uint64, Result, error) {
	typ, id, body, err := cn.rd.next()
	if err != nil {
		return 0, Result{}, err
	}
	if typ != typeResult {
		return 0, Result{}, fmt.Errorf("%w: type %d from a server", ErrMalformed, typ)
	}
	res, err := parseResult(body)
	return id, res, err
}

// broke closes the broken connection, fails every call in flight and
// forgets the connection; it returns the failure.
func (cn *conn) broke(c *Client, err error) error {
	cn.nc.Close()
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
	cn.endLocked(broken)
	me := cn.reader
	cn.reader = nil
	for id, w := range cn.pending {
		delete(cn.pending, id)
		if w != me {
			w.res = Result{Err: broken}
			w.ch <- wakeAnswer
		}
	}
	cn.pmu.Unlock()
	return broken
}

// Close closes the connection. Calls in flight fail. Idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	cn := c.cn
	c.mu.Unlock()
	if cn != nil {
		cn.end(ErrClosed) // the call reading sees it and fails the others
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
