package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
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
	Secret []byte // the cluster's secret; empty: no authentication (demos)
	// Timeout bounds each call, and the dial and handshake. If zero, 50 ms.
	Timeout time.Duration
	// Dial dials the peer. If nil, net.Dialer.DialContext over TCP. Tests use
	// it to put a fault-injecting network in between.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Client is a connection to one peer that carries many calls at once. Calls
// write their frames themselves, and whoever finds no write in progress
// writes everything queued so far (batching by opportunity: no timer, no
// writer goroutine hand-off at low load). One goroutine per connection reads
// the answers and hands each to its caller. A broken connection fails the
// calls in flight and is dialled again by the next call.
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
}

// NewClient returns a Client for cfg.Addr. It dials on first use.
func NewClient(cfg ClientConfig) *Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 50 * time.Millisecond
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	c := &Client{cfg: cfg}
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
}

type conn struct {
	nc net.Conn

	wmu      sync.Mutex
	wbuf     []byte
	spare    []byte
	flushing bool

	pmu     sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	err     error // set once the connection broke
}

// Do sends r and waits for its result, at most the Timeout (or the
// context's end, if sooner).
func (c *Client) Do(ctx context.Context, r *Request) (Result, error) {
	return c.DoTimeout(ctx, r, c.cfg.Timeout)
}

// DoTimeout is Do with another timeout than the Client's, for requests that
// carry more than a decision (a hand-off batch).
func (c *Client) DoTimeout(ctx context.Context, r *Request, timeout time.Duration) (Result, error) {
	start := time.Now()
	cn, err := c.conn(ctx, start.Add(c.cfg.Timeout))
	if err != nil {
		return Result{}, err
	}
	cl := c.calls.Get().(*call)
	id, err := cn.register(cl)
	if err != nil {
		c.calls.Put(cl)
		return Result{}, err
	}
	cl.timer.Reset(timeout - time.Since(start)) // one timeout for dial, write and answer
	cn.write(c, r, id)
	select {
	case res := <-cl.ch:
		cl.timer.Stop()
		c.calls.Put(cl)
		if res.Err != nil && errors.Is(res.Err, errBroken) {
			return Result{}, res.Err
		}
		return res, nil
	case <-cl.timer.C:
		err = fmt.Errorf("%w after %s", ErrTimeout, timeout)
	case <-ctx.Done():
		cl.timer.Stop()
		err = ctx.Err()
	}
	// Abandoned: if the answer comes now, the reader drops it; if it came
	// just before, drain it so the pooled call starts empty.
	if !cn.unregister(id) {
		<-cl.ch
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
	if err := clientHandshake(nc, c.cfg.Secret, c.cfg.Name, time.Until(deadline)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("peer: %s: %w", c.cfg.Addr, err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	cn = &conn{nc: nc, pending: map[uint64]*call{}}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
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
	return cn.nextID, nil
}

// unregister removes id; false if the reader already took it.
func (cn *conn) unregister(id uint64) bool {
	cn.pmu.Lock()
	defer cn.pmu.Unlock()
	if _, ok := cn.pending[id]; !ok {
		return false
	}
	delete(cn.pending, id)
	return true
}

// write queues r's frame and, if no write is in progress, writes everything
// queued, repeating while more arrives during the write.
func (cn *conn) write(c *Client, r *Request, id uint64) {
	cn.wmu.Lock()
	cn.wbuf = appendRequest(cn.wbuf, id, r)
	if cn.flushing {
		cn.wmu.Unlock()
		return
	}
	cn.flushing = true
	for len(cn.wbuf) > 0 {
		buf := cn.wbuf
		cn.wbuf = cn.spare[:0]
		cn.wmu.Unlock()
		_ = cn.nc.SetWriteDeadline(time.Now().Add(c.cfg.Timeout))
		_, err := cn.nc.Write(buf)
		cn.wmu.Lock()
		cn.spare = buf[:0]
		if err != nil {
			cn.wbuf = cn.wbuf[:0]
			cn.nc.Close() // the reader sees it and fails the calls in flight
			break
		}
	}
	cn.flushing = false
	cn.wmu.Unlock()
}

// read hands each result to its caller until the connection breaks, then
// fails the calls still in flight and forgets the connection.
func (c *Client) read(cn *conn) {
	defer c.wg.Done()
	r := bufio.NewReaderSize(cn.nc, 64<<10)
	var hdr [headerLen]byte
	body := make([]byte, 0, resultLen)
	var err error
	for {
		if _, err = io.ReadFull(r, hdr[:]); err != nil {
			break
		}
		var typ byte
		var id uint64
		var n int
		if typ, id, n, err = parseHeader(hdr[:]); err != nil {
			break
		}
		if typ != typeResult || n < resultLen {
			err = fmt.Errorf("%w: type %d, %d bytes from a server", ErrMalformed, typ, n)
			break
		}
		if cap(body) < n {
			body = make([]byte, 0, n)
		}
		body = body[:n]
		if _, err = io.ReadFull(r, body); err != nil {
			break
		}
		var res Result
		if res, err = parseResult(body); err != nil {
			break
		}
		cn.pmu.Lock()
		cl := cn.pending[id]
		delete(cn.pending, id)
		cn.pmu.Unlock()
		if cl != nil {
			cl.ch <- res
		}
	}
	cn.nc.Close()
	c.mu.Lock()
	if c.cn == cn {
		c.cn = nil
	}
	c.mu.Unlock()
	broken := fmt.Errorf("%w: %s: %w", errBroken, c.cfg.Addr, err)
	cn.pmu.Lock()
	cn.err = broken
	for id, cl := range cn.pending {
		delete(cn.pending, id)
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
