package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// keyedBlocker holds requests on key "slow" until released, counts the
// requests it holds and the bytes of their states.
type keyedBlocker struct {
	release      chan struct{}
	held, served atomic.Int64
	all          bool // hold every request, not only "slow"
}

func (h *keyedBlocker) Serve(ctx context.Context, r *Request) Result {
	if r.Key == "slow" || h.all {
		h.held.Add(1)
		defer h.held.Add(-1)
		select {
		case <-h.release:
		case <-ctx.Done():
		}
	}
	h.served.Add(1)
	return Result{Decision: truth(r.Key)}
}

// Quick: every request but those on "slow" is served on the reader.
func (h *keyedBlocker) Quick(r *Request) bool { return !h.all && r.Key != "slow" }

// A slow request does not delay another key's answer on the same
// connection, whether that answer is served on the reader (Quick) or on a
// worker.
func TestSlowRequestDoesNotBlockTheConnection(t *testing.T) {
	h := &keyedBlocker{release: make(chan struct{})}
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: h})
	defer s.Close()
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 10 * time.Second})
	defer c.Close()
	slow := make(chan error, 1)
	go func() {
		_, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "slow", Rule: rule, N: 1})
		slow <- err
	}()
	waitFor(t, func() bool { return h.held.Load() == 1 })
	for i := range 20 {
		res, err := c.DoTimeout(context.Background(), &Request{Op: OpAllow, Key: "fast", Rule: rule, N: 1}, time.Second)
		if err != nil || res.Decision != truth("fast") {
			t.Fatalf("call %d behind a slow one: %+v, %v", i, res, err)
		}
	}
	// A second slow request is served beside the first, and quick ones
	// beside both.
	slow2 := make(chan error, 1)
	go func() {
		_, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "slow", Rule: rule, N: 1})
		slow2 <- err
	}()
	waitFor(t, func() bool { return h.held.Load() == 2 })
	if _, err := c.DoTimeout(context.Background(), &Request{Op: OpAllow, Key: "fast", Rule: rule, N: 1}, time.Second); err != nil {
		t.Fatal(err)
	}
	if h.held.Load() != 2 {
		t.Fatal("a slow request finished early")
	}
	close(h.release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if err := <-slow2; err != nil {
		t.Fatal(err)
	}
}

// A connection serves at most MaxInFlight requests at once, and holds at
// most MaxInFlightBytes of request bodies: beyond either, its reader waits.
func TestInFlightBounds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      ServerConfig
		value    int
		wantHeld int64
	}{
		{"requests", ServerConfig{MaxInFlight: 3}, 10, 3},
		{"bytes", ServerConfig{MaxInFlightBytes: 2500}, 990, 2}, // bodies of 1,001 bytes: two fit
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &keyedBlocker{release: make(chan struct{}), all: true}
			cfg := tc.cfg
			cfg.Secret, cfg.Handler = secret, h
			s := Serve(listen(t), cfg)
			defer s.Close()
			c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 10 * time.Second})
			defer c.Close()
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := Request{Op: OpStates, States: []Item{{Key: "k", Value: make([]byte, tc.value)}}}
					if _, err := c.Do(context.Background(), &r); err != nil {
						t.Error(err)
					}
				}()
			}
			waitFor(t, func() bool { return h.held.Load() == tc.wantHeld && s.readerWaits.Load() > 0 })
			if got := h.held.Load(); got != tc.wantHeld {
				t.Fatalf("%d requests held, want %d", got, tc.wantHeld)
			}
			close(h.release)
			wg.Wait()
			if h.served.Load() != 8 {
				t.Fatalf("%d of 8 served", h.served.Load())
			}
		})
	}
}

// lineCounter counts log lines and keeps them.
type lineCounter struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *lineCounter) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}
func (l *lineCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lineCounter) WithGroup(string) slog.Handler      { return l }
func (l *lineCounter) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// closedAtOnce dials s and reports whether the connection was closed
// without a byte from the server.
func closedAtOnce(t *testing.T, s *Server) bool {
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(nc)
	return len(got) == 0 && err == nil
}

// Beyond MaxConns or MaxHandshakes a connection is closed before anything
// is read or written; each refusal is counted, and logged as one line and
// a summary, not one line each.
func TestCapsRefuseAtOnceAndSummarise(t *testing.T) {
	logs := &lineCounter{}
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: &truthHandler{}, MaxConns: 2,
		Logger: slog.New(logs), LogInterval: time.Hour})
	rawConn(t, s)
	rawConn(t, s)
	waitFor(t, func() bool { return s.Stats().Conns == 2 })
	for i := range 50 {
		if !closedAtOnce(t, s) {
			t.Fatalf("connection %d over MaxConns was served", i)
		}
	}
	if st := s.Stats(); st.RefusedCap != 50 || st.Conns != 2 {
		t.Fatalf("stats %+v, want 50 refused over the cap", st)
	}
	s.Close()
	lines := logs.all()
	if len(lines) != 2 || !strings.Contains(lines[1], "suppressed=49") {
		t.Fatalf("%d log lines for 50 refusals, want a line and a summary: %q", len(lines), lines)
	}

	// Half-open handshakes from one address fill a quarter of the
	// handshake slots, and from several addresses all of them; beyond
	// either, the next connection is closed at once.
	s = Serve(listen(t), ServerConfig{Secret: secret, Handler: &truthHandler{}, MaxHandshakes: 8})
	defer s.Close()
	from := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		nc, err := d.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	greeted := func(nc net.Conn) bool {
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := io.ReadFull(nc, make([]byte, len(magic)+1+nonceLen+1))
		return n > 0
	}
	for range 2 {
		from("127.0.0.2")
	}
	waitFor(t, func() bool { return s.Stats().Handshakes == 2 })
	if greeted(from("127.0.0.2")) {
		t.Fatal("a third half-open handshake from one address was served")
	}
	if !greeted(from("127.0.0.3")) {
		t.Fatal("another address was refused while the handshake slots had room")
	}
	for _, ip := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.4", "127.0.0.5"} {
		from(ip)
	}
	waitFor(t, func() bool { return s.Stats().Handshakes == 7 })
	from("127.0.0.5")
	waitFor(t, func() bool { return s.Stats().Handshakes == 8 })
	if greeted(from("127.0.0.6")) {
		t.Fatal("a connection over MaxHandshakes was served")
	}
	if st := s.Stats(); st.RefusedHandshakes != 2 {
		t.Fatalf("stats %+v, want 2 refused in the handshake", st)
	}
}

// A record whose first bytes arrived must be complete within BodyTimeout;
// a connection on which nothing arrives is closed after IdleTimeout.
func TestBodyAndIdleDeadlines(t *testing.T) {
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: &truthHandler{}, BodyTimeout: 50 * time.Millisecond,
		IdleTimeout: 200 * time.Millisecond})
	defer s.Close()
	nc, _ := rawConn(t, s)
	nc.Write([]byte{0, 0, 4, 0, 1}) // announces 1,024 bytes, sends one
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("stalled body: %v, want the server to close", err)
	}
	waitFor(t, func() bool { return s.Stats().BodyTimeouts == 1 })

	nc, _ = rawConn(t, s)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: %v, want the server to close", err)
	}
	waitFor(t, func() bool { return s.Stats().IdleClosed == 1 })
}

// A client closes its idle connection, and dials again on the next call.
func TestClientClosesIdleConnections(t *testing.T) {
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: &truthHandler{}})
	defer s.Close()
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: time.Second, IdleTimeout: 50 * time.Millisecond})
	defer c.Close()
	for range 2 {
		if _, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return s.Stats().Conns == 0 })
	}
	if st := s.Stats(); st.IdleClosed != 0 {
		t.Fatalf("the server closed the idle connections: %+v", st)
	}
}

// With ServerConfig.Member, a quarter of the handshake slots is kept for
// members' addresses: half-open handshakes from other addresses take the
// rest and no more, and a member still connects and is served. The
// per-address cap holds for members too.
func TestMembersKeepHandshakeSlots(t *testing.T) {
	member := netip.MustParseAddr("127.0.0.9")
	var m Members
	m.Set([]string{"127.0.0.9:7947", "node-b.example:7947", "[::1]:1"})
	if !m.Has(member) || m.Has(netip.MustParseAddr("127.0.1.1")) {
		t.Fatal("Members does not hold what it was set to")
	}
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: &truthHandler{}, MaxHandshakes: 8, Member: m.Has})
	defer s.Close()
	dial := func(ip string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		nc, err := d.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	greeted := func(nc net.Conn) bool {
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := io.ReadFull(nc, make([]byte, len(magic)+1+nonceLen+1))
		return n > 0
	}
	// Six addresses take the six slots not kept.
	for i := range 6 {
		if !greeted(dial(fmt.Sprintf("127.0.1.%d", i+1))) {
			t.Fatalf("flood connection %d refused with slots free", i)
		}
	}
	waitFor(t, func() bool { return s.Stats().Handshakes == 6 })
	for i := range 20 {
		if greeted(dial(fmt.Sprintf("127.0.2.%d", i+1))) {
			t.Fatalf("another address took a slot kept for members (%d)", i)
		}
	}
	// The member connects through the flood, and is served.
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 5 * time.Second,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IP(member.AsSlice())}}
			return d.DialContext(ctx, "tcp", addr)
		}})
	defer c.Close()
	if res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}); err != nil || res.Decision != truth("k") {
		t.Fatalf("the member through the flood: %+v, %v", res, err)
	}
	// The member's own half-open handshakes take the kept slots, and the
	// server's cap still holds.
	for range 2 {
		if !greeted(dial("127.0.0.9")) {
			t.Fatal("a member refused with kept slots free")
		}
	}
	waitFor(t, func() bool { return s.Stats().Handshakes == 8 })
	if greeted(dial("127.0.0.9")) {
		t.Fatal("a member served over MaxHandshakes")
	}
	if st := s.Stats(); st.RefusedHandshakes != 21 {
		t.Fatalf("stats %+v, want 21 refused in the handshake", st)
	}
}
