package peer

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/logsum"
)

// Handler serves forwarded requests and hand-off steps. A request the
// Handler reports Quick is served on the connection's reader; every other
// on a worker of the connection, up to ServerConfig.MaxInFlight at once, so
// a slow request (a hand-off pull, a slow store load) delays no other. It
// must still not block for long: the owner decides from its own state (one
// hop, never forwarded again; a hand-off pull of the key's state, bounded by
// a timeout, is not a forwarded decision).
type Handler interface {
	Serve(ctx context.Context, r *Request) Result
}

// Quick is implemented by a Handler that can tell which requests it answers
// at once, from memory, without waiting on anything. The connection's
// reader serves those itself, in order, and answers a burst of them in one
// write; it hands every other request to a worker. A Handler that is not a
// Quick has every request served on a worker.
type Quick interface {
	Quick(r *Request) bool
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

// ServerConfig configures a Server. Every zero value has a default.
type ServerConfig struct {
	Secret []byte // the cluster's secret; empty: no authentication, frames in clear (demos)
	// Accept lists other secrets a client may prove instead of Secret, for
	// a rotation: the connection is then authenticated and sealed with the
	// one the client used. Ignored without a Secret. If empty, Secret only.
	Accept  [][]byte
	Name    string  // this node's name, told to clients in the handshake (at most 255 bytes)
	Handler Handler // required
	// HandshakeTimeout bounds the handshake. If zero, 2 s.
	HandshakeTimeout time.Duration
	// MaxConns bounds the authenticated connections. A connection accepted
	// beyond it is closed at once, before anything is read. If zero, 1024.
	MaxConns int
	// MaxHandshakes bounds the connections still in the handshake, and a
	// quarter of it those from one IP address; beyond either, a new
	// connection is closed at once. If zero, 32.
	MaxHandshakes int
	// Member, if not nil, reports whether an IP address is a current
	// member's (a node passes its Members.Has). A quarter of the handshake
	// slots is then kept for members: a connection from any other address
	// is closed at once while the rest are taken, so a flood from any
	// number of addresses never keeps a member from connecting. It is
	// asked only when the other slots are full, on the accepting goroutine:
	// it must be quick. If nil, no slot is kept.
	Member func(ip netip.Addr) bool
	// BodyTimeout bounds the wait for the rest of a record once its first
	// byte has arrived. If zero, 2 s.
	BodyTimeout time.Duration
	// IdleTimeout closes an authenticated connection on which nothing
	// arrived for that long. If zero, 2 min (clients close theirs after
	// 1 min, so a client never sends on a connection the server is closing).
	IdleTimeout time.Duration
	// MaxInFlight bounds the requests of one connection served at once. If
	// zero, 64.
	MaxInFlight int
	// MaxInFlightBytes bounds the bytes of one connection's records being
	// read or served; a record counts from the moment its length is read,
	// before its body, and a connection over it is not read until its
	// requests are answered (a lone record always is). A record of
	// several frames (version 3) counts whole, and is at most 4 KiB and a
	// tag. If zero, 8 MiB (two hand-off batches).
	MaxInFlightBytes int
	// Logger receives refused and failed connections, summarised: one line
	// per kind and LogInterval with a count, never one line each. Nil
	// discards.
	Logger *slog.Logger
	// LogInterval is the summaries' interval. If zero, 10 s.
	LogInterval time.Duration

	// version is the highest protocol version served; if zero, Version.
	// Tests play a node of an earlier release with it.
	version byte
}

// Stats are a Server's counters.
type Stats struct {
	// Conns is the authenticated connections open; Handshakes those still
	// in the handshake.
	Conns, Handshakes int64
	// Refusals by cause: RefusedCap were over MaxConns, RefusedHandshakes
	// over MaxHandshakes (both closed before reading), RefusedAuth failed or
	// timed out in the handshake (no proof of the secret, another protocol,
	// no common version).
	RefusedCap, RefusedHandshakes, RefusedAuth uint64
	// RejectedFrames counts records that failed to open (modified,
	// replayed, dropped before, reordered) or to parse; each closed its
	// connection. BodyTimeouts counts connections closed because a record
	// stalled after its first byte; IdleClosed those closed for idleness.
	RejectedFrames, BodyTimeouts, IdleClosed uint64
	// BadCalls counts requests that parsed into a call no rule can make
	// (a window over ringlimit.MaxWindow, a count of rules out of range):
	// each was answered with ringlimit.ErrInvalidRule, and its connection
	// kept.
	BadCalls uint64
}

// Server accepts peer connections and serves their requests.
type Server struct {
	cfg     ServerConfig
	secrets [][]byte // the secrets a client may prove: cfg.Secret first, then cfg.Accept's
	ln      net.Listener
	ctx     context.Context
	log     *logsum.Summarizer

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	perIP  map[netip.Addr]int // connections in the handshake by remote IP
	closed bool
	cancel context.CancelFunc
	wg     sync.WaitGroup

	nConns, nHandshakes                        atomic.Int64
	refusedCap, refusedHandshakes, refusedAuth atomic.Uint64
	rejectedFrames, bodyTimeouts, idleClosed   atomic.Uint64
	badCalls                                   atomic.Uint64
	readerWaits                                atomic.Uint64 // a reader waited for its connection's bound (tests)
	idleDrops                                  atomic.Uint64 // connections that dropped their buffers for idleness (tests)
	pending                                    atomic.Int64  // bytes of records admitted on every connection: being read or served (tests)
}

// Serve starts serving on ln in the background. Close stops it.
func Serve(ln net.Listener, cfg ServerConfig) *Server {
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 2 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1024
	}
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = 32
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 2 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.MaxInFlightBytes <= 0 {
		cfg.MaxInFlightBytes = 8 << 20
	}
	if cfg.LogInterval <= 0 {
		cfg.LogInterval = logsum.DefaultInterval
	}
	if cfg.version == 0 {
		cfg.version = Version
	}
	secrets := [][]byte{cfg.Secret}
	if len(cfg.Secret) > 0 {
		for _, k := range cfg.Accept {
			if len(k) > 0 { // an empty one would let in clients without the secret
				secrets = append(secrets, k)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, secrets: secrets, ln: ln, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{},
		perIP: map[netip.Addr]int{}, log: logsum.New(cfg.Logger, cfg.LogInterval)}
	s.wg.Add(2)
	go s.accept()
	go s.flushLog()
	return s
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{
		Conns:             s.nConns.Load(),
		Handshakes:        s.nHandshakes.Load(),
		RefusedCap:        s.refusedCap.Load(),
		RefusedHandshakes: s.refusedHandshakes.Load(),
		RefusedAuth:       s.refusedAuth.Load(),
		RejectedFrames:    s.rejectedFrames.Load(),
		BodyTimeouts:      s.bodyTimeouts.Load(),
		IdleClosed:        s.idleClosed.Load(),
		BadCalls:          s.badCalls.Load(),
	}
}

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
	s.log.Flush(true)
	return err
}

// flushLog writes the summaries of suppressed lines once their interval is
// over.
func (s *Server) flushLog() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.LogInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.log.Flush(false)
		}
	}
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
			s.log.Warn("peer: accept", "peer: accept failed; retrying", "err", err, "in", backoff)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		// Over a cap: close before reading anything, so a flood costs
		// an accept and a close, and no goroutine. The last slots are
		// kept for members (ServerConfig.Member).
		ip := remoteIP(c)
		if hs := s.nHandshakes.Load(); hs >= int64(s.cfg.MaxHandshakes) ||
			hs >= int64(s.cfg.MaxHandshakes-s.reserved()) && !s.cfg.Member(ip) {
			s.refusedHandshakes.Add(1) // counted before the peer sees the close
			c.Close()
			s.log.Warn("peer: refused: handshakes", "peer: refused connections: too many in the handshake",
				"max", s.cfg.MaxHandshakes, "remote", c.RemoteAddr().String())
			continue
		}
		if s.nConns.Load() >= int64(s.cfg.MaxConns) {
			s.refusedCap.Add(1)
			c.Close()
			s.log.Warn("peer: refused: cap", "peer: refused connections: MaxConns reached",
				"max", s.cfg.MaxConns, "remote", c.RemoteAddr().String())
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		if s.perIP[ip] >= max(1, s.cfg.MaxHandshakes/4) {
			// One source may hold a quarter of the handshake slots, so
			// that a flood from one address leaves room for the peers.
			s.mu.Unlock()
			s.refusedHandshakes.Add(1) // counted before the peer sees the close
			c.Close()
			s.log.Warn("peer: refused: handshakes", "peer: refused connections: too many in the handshake",
				"max", s.cfg.MaxHandshakes, "remote", c.RemoteAddr().String())
			continue
		}
		s.perIP[ip]++
		s.conns[c] = struct{}{}
		s.nHandshakes.Add(1)
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// remoteIP is c's remote IP address, the zero Addr if it has none.
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

// reserved is the handshake slots kept for members: a quarter, if the
// server can tell members.
func (s *Server) reserved() int {
	if s.cfg.Member == nil {
		return 0
	}
	return s.cfg.MaxHandshakes / 4
}

// serve runs one connection: the handshake, then a reader that hands each
// request to a worker, and workers that write each answer as soon as it is
// ready (batched by opportunity with the other workers' answers).
func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	tx, rx, v, err := serverHandshakeUpTo(c, s.secrets, s.cfg.Name, s.cfg.HandshakeTimeout, s.cfg.version)
	s.nHandshakes.Add(-1)
	ip := remoteIP(c)
	s.mu.Lock()
	if s.perIP[ip]--; s.perIP[ip] <= 0 {
		delete(s.perIP, ip)
	}
	s.mu.Unlock()
	if err != nil {
		s.refusedAuth.Add(1)
		s.log.Warn("peer: refused: handshake", "peer: refused connections: handshake failed",
			"remote", c.RemoteAddr().String(), "err", err)
		return
	}
	if n := s.nConns.Add(1); n > int64(s.cfg.MaxConns) {
		s.nConns.Add(-1)
		s.refusedCap.Add(1)
		s.log.Warn("peer: refused: cap", "peer: refused connections: MaxConns reached",
			"max", s.cfg.MaxConns, "remote", c.RemoteAddr().String())
		return
	}
	defer s.nConns.Add(-1)
	sc := &sconn{s: s, nc: c, jobs: make(chan job), done: make(chan struct{}), freed: make(chan struct{}, 1)}
	sc.wr.seal, sc.wr.batch = tx, v >= 3
	sc.cond.L = &sc.mu
	sc.rd = reader{c: c, open: rx, single: v < 3, bodyTimeout: s.cfg.BodyTimeout,
		idleStep: min(time.Second, s.cfg.IdleTimeout/4), idleTimeout: s.cfg.IdleTimeout,
		onIdle: func() { sc.wr.release(); s.idleDrops.Add(1) }, admit: sc.admit}
	sc.run()
}

// sconn is one authenticated connection of a Server.
type sconn struct {
	s  *Server
	nc net.Conn
	rd reader
	wr writer

	jobs    chan job      // to an idle worker
	done    chan struct{} // closed when the reader stops: idle workers leave
	freed   chan struct{} // a worker left
	workers atomic.Int32
	active  atomic.Bool // the reader is working through buffered requests

	mu       sync.Mutex // guards inflight
	cond     sync.Cond
	inflight int // bytes of the records admitted: being read or served
}

type job struct {
	id   uint64
	req  Request
	size int
}

// workerIdle is how long a worker waits for another request before it
// leaves (between one and two periods): a quiet connection keeps no
// worker.
const workerIdle = time.Second

func (sc *sconn) run() {
	s := sc.s
	var wg sync.WaitGroup
	defer func() {
		sc.nc.Close()
		close(sc.done)
		wg.Wait()
	}()
	sc.rd.start()
	for {
		if !sc.rd.buffered() {
			sc.endBurst() // about to wait for input: write the answers queued
		}
		typ, id, body, err := sc.rd.next()
		sc.active.Store(true)
		// The frame's share of its record's bytes, counted by admit when
		// the record's length was read: the request gives them back when
		// it is answered.
		size := sc.rd.size
		if err != nil {
			sc.release(sc.rd.held) // what no request will give back
			// Closed before it is counted: a client that sees the count
			// (a test) finds the connection closed on its next call.
			sc.nc.Close()
			sc.failed(err)
			return
		}
		req, err := parseRequest(typ, body)
		if err != nil {
			if errors.Is(err, ErrMalformed) {
				sc.release(size + sc.rd.held)
				sc.failed(err)
				return
			}
			sc.release(size)
			sc.badCall(id, err) // a bad call in a good frame: answered, the connection carries on
			continue
		}
		if q, ok := s.cfg.Handler.(Quick); ok && q.Quick(&req) {
			sc.serveQuick(id, &req)
			sc.release(size)
			continue
		}
		j := job{id: id, req: req, size: size}
		select {
		case sc.jobs <- j:
			continue
		default:
		}
		for {
			if sc.workers.Load() < int32(s.cfg.MaxInFlight) {
				sc.workers.Add(1)
				wg.Add(1)
				go sc.work(&wg, j)
				break
			}
			s.readerWaits.Add(1)
			sc.endBurst()
			select {
			case sc.jobs <- j:
			case <-sc.freed:
				continue
			}
			break
		}
	}
}

// admit counts a record of n bytes, whose length the reader just read,
// against the connection's in-flight bytes before the reader reads its
// body: while other requests are in flight and it would take the
// connection over MaxInFlightBytes, the reader waits for their answers
// (and writes those queued meanwhile). So what a connection announces, and
// the reader buffers, stays within the bound beside the bodies being served;
// a lone record always fits (records are at most MaxStatesBody and a tag).
// The request it carries gives the bytes back when it is answered.
func (sc *sconn) admit(n int) {
	s := sc.s
	sc.mu.Lock()
	for sc.inflight > 0 && sc.inflight+n > s.cfg.MaxInFlightBytes {
		s.readerWaits.Add(1)
		sc.mu.Unlock()
		sc.endBurst()
		sc.mu.Lock()
		if sc.inflight > 0 && sc.inflight+n > s.cfg.MaxInFlightBytes {
			sc.cond.Wait()
		}
	}
	sc.inflight += n
	sc.mu.Unlock()
	s.pending.Add(int64(n))
}

// release gives back n bytes that admit counted.
func (sc *sconn) release(n int) {
	sc.mu.Lock()
	sc.inflight -= n
	sc.cond.Broadcast()
	sc.mu.Unlock()
	sc.s.pending.Add(-int64(n))
}

// serveQuick serves a quick request on the reader and queues its answer:
// the reader writes it at the end of its burst.
func (sc *sconn) serveQuick(id uint64, req *Request) {
	res := sc.s.cfg.Handler.Serve(sc.s.ctx, req)
	sc.wr.mu.Lock()
	st := sc.wr.begin()
	sc.wr.buf = appendResult(sc.wr.buf, id, &res)
	sc.wr.end(st)
	sc.wr.mu.Unlock()
}

// badCall answers a request that parsed into a call no rule can make (see
// parseRequest) with its error, on the reader, as serveQuick does.
func (sc *sconn) badCall(id uint64, err error) {
	s := sc.s
	s.badCalls.Add(1)
	s.log.Warn("peer: bad call", "peer: answered calls no rule can make with an error (a peer of another release?)",
		"remote", sc.nc.RemoteAddr().String(), "err", err)
	res := Result{Err: err}
	sc.wr.mu.Lock()
	st := sc.wr.begin()
	sc.wr.buf = appendResult(sc.wr.buf, id, &res)
	sc.wr.end(st)
	sc.wr.mu.Unlock()
}

// endBurst marks the reader as no longer working through buffered
// requests, and writes the answers queued meanwhile: while a burst lasts,
// answers (the reader's and the workers') are queued, so that a burst of
// requests is answered in few writes; after it, a worker writes its own.
func (sc *sconn) endBurst() {
	sc.active.Store(false)
	sc.wr.mu.Lock()
	if len(sc.wr.buf) == 0 {
		sc.wr.mu.Unlock()
		return
	}
	if err := sc.wr.flush(sc.nc, sc.s.cfg.BodyTimeout); err != nil {
		sc.nc.Close() // the reader sees it and stops
	}
}

// failed counts and logs why the reader stopped.
func (sc *sconn) failed(err error) {
	s := sc.s
	switch {
	case errors.Is(err, errIdle):
		s.idleClosed.Add(1)
	case errors.Is(err, errBodyTimeout):
		s.bodyTimeouts.Add(1)
		s.log.Warn("peer: closed: body timeout", "peer: closed connections: a record stalled",
			"remote", sc.nc.RemoteAddr().String(), "err", err)
	case errors.Is(err, ErrSealed), errors.Is(err, ErrMalformed):
		s.rejectedFrames.Add(1)
		s.log.Warn("peer: closed: rejected frame", "peer: closed connections: rejected frame",
			"remote", sc.nc.RemoteAddr().String(), "err", err)
	}
}

// work serves j, then whatever the reader hands it, until it has been idle
// for workerIdle or the connection is closed.
func (sc *sconn) work(wg *sync.WaitGroup, j job) {
	defer wg.Done()
	defer func() {
		sc.workers.Add(-1)
		select {
		case sc.freed <- struct{}{}:
		default:
		}
	}()
	// The timer is re-armed once per workerIdle, not per request: a
	// worker leaves when it served nothing for a whole period.
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		sc.serveOne(&j)
		served := true
		for got := false; !got; {
			select {
			case j = <-sc.jobs:
				got = true
			case <-t.C:
				if !served {
					return
				}
				served = false
				t.Reset(workerIdle)
			case <-sc.done:
				return
			}
		}
	}
}

func (sc *sconn) serveOne(j *job) {
	res := sc.s.cfg.Handler.Serve(sc.s.ctx, &j.req)
	j.req = Request{}
	sc.wr.mu.Lock()
	st := sc.wr.begin()
	sc.wr.buf = appendResult(sc.wr.buf, j.id, &res)
	sc.wr.end(st)
	if sc.active.Load() {
		sc.wr.mu.Unlock() // the reader writes it at the end of its burst
	} else if err := sc.wr.flush(sc.nc, sc.s.cfg.BodyTimeout); err != nil {
		sc.nc.Close() // the reader sees it and stops
	}
	sc.release(j.size)
}
