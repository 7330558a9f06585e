package peer

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit"
)

// Handler serves forwarded requests and hand-off steps. It is called on the
// connection's goroutine, one request at a time per connection, and must not
// block for long: the owner decides from its own state (one hop, never
// forwarded again; a hand-off pull of the key's state, bounded by a timeout,
// is not a forwarded decision).
type Handler interface {
	Serve(ctx context.Context, r *Request) Result
}

// LimiterHandler serves requests from a ringlimit.Limiter.
type LimiterHandler struct{ Limiter ringlimit.Limiter }

func (h LimiterHandler) Serve(ctx context.Context, r *Request) Result {
	switch r.Op {
	case OpReset:
		return Result{Err: h.Limiter.Reset(ctx, r.Key)}
	case OpTake, OpStates:
		return Result{} // a plain Limiter holds no state to hand off
	}
	d, err := h.Limiter.AllowN(ctx, r.Key, r.Rule, r.N)
	return Result{Decision: d, Err: err}
}

// ServerConfig configures a Server.
type ServerConfig struct {
	Secret  []byte  // the cluster's secret; empty: no authentication (demos)
	Name    string  // this node's name, told to clients in the handshake (at most 255 bytes)
	Handler Handler // required
	// HandshakeTimeout bounds the handshake. If zero, 2 s.
	HandshakeTimeout time.Duration
	Logger           *slog.Logger // nil discards
}

// Server accepts peer connections and serves their requests.
type Server struct {
	cfg ServerConfig
	ln  net.Listener
	ctx context.Context

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Serve starts serving on ln in the background. Close stops it.
func Serve(ln net.Listener, cfg ServerConfig) *Server {
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, ln: ln, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops accepting, closes every connection and waits for their
// goroutines. Idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, an aborted connection: wait and
			// accept again, as net/http does. Giving up would leave the
			// node owning keys that no peer can reach.
			if backoff == 0 {
				backoff = 5 * time.Millisecond
			} else {
				backoff = min(2*backoff, time.Second)
			}
			s.cfg.Logger.Warn("peer: accept; retrying", "err", err, "in", backoff)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// serve runs one connection: handshake, then read a frame, answer it, and
// flush the answers whenever no more input is already buffered — so answers
// to a burst of requests leave in one write, and a lone request waits for
// nothing.
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	if err := serverHandshake(c, s.cfg.Secret, s.cfg.Name, s.cfg.HandshakeTimeout); err != nil {
		s.cfg.Logger.Warn("peer: refused a connection", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	r := bufio.NewReaderSize(c, 64<<10)
	var hdr [headerLen]byte
	body := make([]byte, 0, 512)
	out := make([]byte, 0, 4<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		typ, id, n, err := parseHeader(hdr[:])
		if err != nil {
			s.cfg.Logger.Warn("peer: closing a connection", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
		body = body[:0]
		if cap(body) < n {
			body = make([]byte, 0, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		req, err := parseRequest(typ, body)
		if err != nil {
			s.cfg.Logger.Warn("peer: closing a connection", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
		if cap(body) > 64<<10 {
			body = make([]byte, 0, 512) // a hand-off batch: do not keep its buffer
		}
		res := s.cfg.Handler.Serve(s.ctx, &req)
		out = appendResult(out, id, &res)
		if r.Buffered() == 0 || len(out) > 32<<10 {
			if _, err := c.Write(out); err != nil {
				return
			}
			out = out[:0]
		}
	}
}
