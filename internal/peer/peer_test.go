package peer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var secret = []byte("0123456789abcdef")

func listen(t testing.TB) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startServer serves a local limiter and returns it with the server.
func startServer(t testing.TB, key []byte) (*Server, *local.Limiter) {
	l := local.New(local.Config{Clock: testclock.New(time.Now())}) // time stands still
	s := Serve(listen(t), ServerConfig{Secret: key, Handler: LimiterHandler{l}})
	t.Cleanup(func() { s.Close() })
	return s, l
}

func newClient(t testing.TB, addr string, key []byte, timeout time.Duration) *Client {
	c := NewClient(ClientConfig{Addr: addr, Secret: key, Timeout: timeout})
	t.Cleanup(func() { c.Close() })
	return c
}

var rule = ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 10, Window: time.Second, Burst: 3}

func TestRoundTrip(t *testing.T) {
	s, l := startServer(t, secret)
	c := newClient(t, s.Addr().String(), secret, time.Second)
	ctx := context.Background()
	for i := range 4 {
		res, err := c.Do(ctx, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
		if err != nil || res.Err != nil {
			t.Fatalf("call %d: %v, %v", i, err, res.Err)
		}
		if want := i < 3; res.Decision.Allowed != want {
			t.Fatalf("call %d: %+v", i, res.Decision)
		}
		if i == 1 && res.Decision.Delay < 90*time.Millisecond {
			t.Fatalf("call 1 lost its Delay: %+v", res.Decision)
		}
	}
	// The owner's state is the one that was used.
	if d, _ := l.Peek(ctx, "k", rule); d.Remaining != 0 {
		t.Fatalf("owner state: %+v", d)
	}
	// Bad input comes back as the sentinel.
	res, err := c.Do(ctx, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 99})
	if err != nil || !errors.Is(res.Err, ringlimit.ErrInvalidHits) {
		t.Fatalf("n over burst: %v, %v", err, res.Err)
	}
	res, err = c.Do(ctx, &Request{Op: OpReset, Key: "k"})
	if err != nil || res.Err != nil {
		t.Fatalf("reset: %v, %v", err, res.Err)
	}
	if d, _ := l.Peek(ctx, "k", rule); d.Remaining != 3 {
		t.Fatalf("after a forwarded reset: %+v", d)
	}
}

func TestConcurrentCallsAreExact(t *testing.T) {
	s, _ := startServer(t, secret)
	c := newClient(t, s.Addr().String(), secret, 5*time.Second)
	r := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 500, Window: time.Hour}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "hot", Rule: r, N: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Decision.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 500 {
		t.Fatalf("%d admitted of 1600, want 500", got)
	}
}

func TestAuthentication(t *testing.T) {
	s, _ := startServer(t, secret)
	for _, tc := range []struct {
		name string
		key  []byte
	}{{"wrong secret", []byte("fedcba9876543210")}, {"no secret", nil}} {
		c := newClient(t, s.Addr().String(), tc.key, time.Second)
		_, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
		if !errors.Is(err, ErrAuth) {
			t.Errorf("%s: err %v, want ErrAuth", tc.name, err)
		}
	}
	// A client that holds the secret is not fooled by a server without it.
	impostor, _ := startServer(t, []byte("fedcba9876543210"))
	c := newClient(t, impostor.Addr().String(), secret, time.Second)
	if _, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}); !errors.Is(err, ErrAuth) {
		t.Errorf("impostor server: err %v, want ErrAuth", err)
	}
	// A connection that skips the handshake is closed before any frame is
	// served.
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	frame := appendRequest(nil, 1, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
	nc.Write(append(make([]byte, len(magic)+1+nonceLen+32), frame...))
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(nc)
	if greeting := len(magic) + 1 + nonceLen + 1; len(got) != greeting {
		t.Fatalf("unauthenticated connection got %d bytes, want only the server's %d-byte greeting", len(got), greeting)
	}
}

// A client that expects one node refuses another, even one with the secret.
func TestHandshakeChecksTheName(t *testing.T) {
	l := local.New(local.Config{})
	s := Serve(listen(t), ServerConfig{Secret: secret, Name: "n2", Handler: LimiterHandler{l}})
	t.Cleanup(func() { s.Close() })
	for _, tc := range []struct {
		want string
		ok   bool
	}{{"n2", true}, {"", true}, {"n1", false}, {"n22", false}} {
		c := NewClient(ClientConfig{Addr: s.Addr().String(), Name: tc.want, Secret: secret, Timeout: time.Second})
		_, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 0})
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrAuth)) {
			t.Errorf("expecting %q of n2: err %v", tc.want, err)
		}
		c.Close()
	}
}

// rawConn returns an authenticated raw connection to s, with the sealer
// of what it sends.
func rawConn(t *testing.T, s *Server) (net.Conn, *sealer) {
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	tx, _, err := clientHandshake(nc, secret, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return nc, tx
}

// record wraps frame in a record sealed by tx (nil: in clear).
func record(tx *sealer, frame []byte) []byte {
	w := writer{seal: tx}
	st := w.begin()
	w.buf = append(w.buf, frame...)
	w.end(st)
	return w.buf
}

// An oversize or garbage frame closes that connection, and only that one.
func TestMalformedFramesCloseOnlyTheirConnection(t *testing.T) {
	s, _ := startServer(t, secret)
	good := newClient(t, s.Addr().String(), secret, time.Second)
	ctx := context.Background()
	if _, err := good.Do(ctx, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}); err != nil {
		t.Fatal(err)
	}
	oversize := append(appendHeader(nil, typeAllow, 1, MaxBody+1), make([]byte, MaxBody+1)...)
	badVersion := append([]byte{9}, make([]byte, headerLen-1)...)
	badType := appendHeader(nil, 77, 1, 0)
	short := appendHeader(nil, typeAllow, 1, 3)
	short = append(short, 1, 2, 3)
	lying := appendHeader(nil, typeReset, 1, 5) // says 5 bytes, carries 1
	lying = append(lying, 'k')
	for name, frame := range map[string][]byte{"oversize": oversize, "version": badVersion, "type": badType,
		"short body": short, "length": lying} {
		nc, tx := rawConn(t, s)
		nc.Write(record(tx, frame))
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := nc.Read(make([]byte, 64)); err == nil {
			t.Errorf("%s: connection still open, read %d bytes", name, n)
		}
		if res, err := good.Do(ctx, &Request{Op: OpAllow, Key: "other-" + name, Rule: rule, N: 1}); err != nil || !res.Decision.Allowed {
			t.Fatalf("%s: the good connection suffered: %+v, %v", name, res, err)
		}
	}
}

// A server that never answers costs a caller the timeout, no more.
func TestTimeout(t *testing.T) {
	ln := listen(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // handshake, then silence
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, _, err := serverHandshake(c, [][]byte{secret}, "", time.Second); err == nil {
			io.Copy(io.Discard, c)
		}
	}()
	c := NewClient(ClientConfig{Addr: ln.Addr().String(), Secret: secret, Timeout: 30 * time.Millisecond})
	start := time.Now()
	_, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("timed out after %s", el)
	}
	c.Close()
	ln.Close()
	wg.Wait()
}

// A dead peer fails calls at once; a restarted one is dialled again.
func TestReconnect(t *testing.T) {
	ln := listen(t)
	addr := ln.Addr().String()
	l := local.New(local.Config{})
	s := Serve(ln, ServerConfig{Secret: secret, Handler: LimiterHandler{l}})
	c := newClient(t, addr, secret, time.Second)
	ctx := context.Background()
	if _, err := c.Do(ctx, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.Do(ctx, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("calls still succeed after the server closed")
		}
	}
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s not free again: %v", addr, err)
	}
	s2 := Serve(ln2, ServerConfig{Secret: secret, Handler: LimiterHandler{l}})
	defer s2.Close()
	for {
		_, err := c.Do(ctx, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reconnect: %v", err)
		}
	}
}

// Close while 1,000 calls are in flight returns promptly and fails them.
func TestCloseWithCallsInFlight(t *testing.T) {
	h := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: h})
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: time.Minute})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}); err != nil {
				failed.Add(1)
			}
		}()
	}
	// Wait until the server holds a request.
	<-h.started
	start := time.Now()
	c.Close()
	wg.Wait()
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Close took %s", el)
	}
	if failed.Load() != 1000 {
		t.Fatalf("%d of 1000 calls failed, want all", failed.Load())
	}
	close(h.release)
	s.Close()
}

// blockingHandler holds every request until released.
type blockingHandler struct {
	once             sync.Once
	started, release chan struct{}
}

func (h *blockingHandler) Serve(ctx context.Context, r *Request) Result {
	h.once.Do(func() { close(h.started) })
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return Result{}
}

func TestFrameRoundTrip(t *testing.T) {
	req := Request{Op: OpAllow, Key: "user:42", Rule: ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 7, Window: time.Minute, Burst: 3}, N: 2}
	b := appendRequest(nil, 99, &req)
	typ, id, n, err := parseHeader(b[:headerLen])
	if err != nil || id != 99 || n != len(b)-headerLen {
		t.Fatalf("header: %d %d %d %v", typ, id, n, err)
	}
	got, err := parseRequest(typ, b[headerLen:])
	if err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("request: %+v, %v", got, err)
	}
	for _, req := range []Request{
		{Op: OpAllow, Key: "user:42", Rule: req.Rule, N: 2, From: "n3"},
		{Op: OpTake, Key: "user:42", From: "n2"},
		{Op: OpStates, States: []Item{{"a", []byte{1, 2, 3}}, {"bb", []byte{}}, {"c", []byte("state")}}},
		{Op: OpStates, States: []Item{}},
	} {
		b := appendRequest(nil, 7, &req)
		typ, _, _, err := parseHeader(b[:headerLen])
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseRequest(typ, b[headerLen:])
		for i := range got.States { // nil and empty values are the same on the wire
			if len(got.States[i].Value) == 0 {
				got.States[i].Value = req.States[i].Value
			}
		}
		if err != nil || !reflect.DeepEqual(got, req) {
			t.Fatalf("request %+v: %+v, %v", req, got, err)
		}
	}
	res := Result{Decision: ringlimit.Decision{Allowed: true, Limit: 7, Remaining: 3, RetryAfter: 5 * time.Millisecond, ResetAfter: time.Minute, Delay: 9 * time.Millisecond, Source: ringlimit.Local}}
	b = appendResult(nil, 5, &res)
	gotRes, err := parseResult(b[headerLen:])
	if err != nil || !reflect.DeepEqual(gotRes, res) {
		t.Fatalf("result: %+v, %v", gotRes, err)
	}
	for _, res := range []Result{{MovedTo: "n2"}, {State: []byte("some state")}} {
		gotRes, err := parseResult(appendResult(nil, 5, &res)[headerLen:])
		if err != nil || !reflect.DeepEqual(gotRes, res) {
			t.Fatalf("result %+v: %+v, %v", res, gotRes, err)
		}
	}
	res = Result{Err: ringlimit.ErrClosed}
	b = appendResult(nil, 5, &res)
	if gotRes, err = parseResult(b[headerLen:]); err != nil || !errors.Is(gotRes.Err, ringlimit.ErrClosed) {
		t.Fatalf("error result: %+v, %v", gotRes, err)
	}
}

// fuzzConn is a byte stream whose deadlines do nothing.
type fuzzConn struct{ *bytes.Reader }

func (fuzzConn) SetReadDeadline(time.Time) error { return nil }

// countingConn counts the bytes read through it; its deadlines do nothing.
type countingConn struct {
	r io.Reader
	n int
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += n
	return n, err
}
func (*countingConn) SetReadDeadline(time.Time) error { return nil }

// fuzzKeys are a fixed pair of sealers for the fuzz target.
func fuzzKeys() (tx, rx *sealer) {
	k := bytes.Repeat([]byte{7}, keyLen)
	tx, _ = newSealer(k)
	rx, _ = newSealer(k)
	return tx, rx
}

// FuzzParse feeds b to every parser of bytes from a peer: as a frame, as
// the frame of a sealed record opened by the record reader, and as a stream
// of records in clear and sealed. Whatever parses round-trips; a sealed
// stream of bytes nobody sealed never parses; nothing panics.
func FuzzParse(f *testing.F) {
	f.Add(appendRequest(nil, 1, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}))
	f.Add(appendRequest(nil, 2, &Request{Op: OpReset, Key: "k"}))
	f.Add(appendResult(nil, 3, &Result{Decision: ringlimit.Decision{Allowed: true}}))
	f.Add(appendResult(nil, 3, &Result{Decision: ringlimit.Decision{ResetAfter: math.MaxInt64}}))
	f.Add(appendResult(nil, 3, &Result{MovedTo: "n2"}))
	f.Add(appendRequest(nil, 4, &Request{Op: OpStates, States: []Item{{"k", []byte{1}}}}))
	f.Add(appendRequest(nil, 5, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1, From: "n1"}))
	f.Add(record(nil, appendRequest(nil, 6, &Request{Op: OpReset, Key: "k"})))
	tx, _ := fuzzKeys()
	f.Add(record(tx, appendRequest(nil, 7, &Request{Op: OpReset, Key: "k"})))
	// Bad calls in good frames: a window over ringlimit.MaxWindow, too many
	// rules; and a record that announces the most bytes and brings few.
	over := appendRequest(nil, 8, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
	binary.BigEndian.PutUint64(over[headerLen+1+8:], uint64(maxWindowMs+1))
	f.Add(over)
	f.Add(appendRequest(nil, 9, &Request{Op: OpAllowAll, Key: "k", Rules: make([]ringlimit.Rule, ringlimit.MaxRules+1), N: 1}))
	f.Add(binary.BigEndian.AppendUint32(nil, maxRecord))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFrame(t, b)

		// b sealed as one record opens to b, and parses as b does.
		tx, rx := fuzzKeys()
		rd := reader{c: fuzzConn{bytes.NewReader(record(tx, b))}, open: rx}
		typ, _, body, err := rd.next()
		if len(b) >= headerLen && len(b) <= maxRecord-tagLen {
			if _, _, n, herr := parseHeader(b[:headerLen]); herr == nil && n == len(b)-headerLen {
				if err != nil || typ != b[1] || !bytes.Equal(body, b[headerLen:]) {
					t.Fatalf("a sealed frame did not open to itself: %v", err)
				}
			}
		}

		// b as a stream of records in clear: each frame parses as above.
		rd = reader{c: fuzzConn{bytes.NewReader(b)}}
		for {
			typ, id, body, err := rd.next()
			if err != nil {
				break
			}
			checkFrame(t, appendHeader(nil, typ, id, len(body)), body...)
		}
		// The same stream arriving a byte at a time gives the same
		// records, and the reader's buffer never outgrows twice what
		// arrived (or startBuf): an announced length costs nothing.
		rd = reader{c: fuzzConn{bytes.NewReader(b)}}
		slow := &countingConn{r: iotest.OneByteReader(bytes.NewReader(b))}
		rd2 := reader{c: slow}
		for {
			typ, id, body, err := rd.next()
			typ2, id2, body2, err2 := rd2.next()
			if (err == nil) != (err2 == nil) || typ != typ2 || id != id2 || !bytes.Equal(body, body2) {
				t.Fatalf("a byte at a time: %d %d %x %v; at once: %d %d %x %v", typ2, id2, body2, err2, typ, id, body, err)
			}
			if len(rd2.buf) > max(startBuf, 2*slow.n) {
				t.Fatalf("a buffer of %d bytes after %d arrived", len(rd2.buf), slow.n)
			}
			if err != nil {
				break
			}
		}
		// b as a stream of sealed records: what opens is exactly the
		// sealing of what it opened to.
		tx, rx = fuzzKeys()
		rd = reader{c: fuzzConn{bytes.NewReader(b)}, open: rx}
		if typ, id, body, err := rd.next(); err == nil {
			again := record(tx, append(appendHeader(nil, typ, id, len(body)), body...))
			if !bytes.HasPrefix(b, again) {
				t.Fatalf("bytes opened that are not the sealing of what they opened to")
			}
		}
	})
}

// checkFrame parses a frame (header, then body: the rest of b and more)
// and checks that what parses re-encodes to what it was.
func checkFrame(t *testing.T, b []byte, more ...byte) {
	b = append(b[:len(b):len(b)], more...)
	if len(b) < headerLen {
		return
	}
	typ, _, n, err := parseHeader(b[:headerLen])
	if err != nil {
		return
	}
	body := b[headerLen:]
	if n > len(body) {
		return
	}
	body = body[:n]
	if typ == typeResult {
		r, err := parseResult(body)
		if err == nil && r.Err == nil {
			again, err := parseResult(appendResult(nil, 0, &r)[headerLen:])
			if err != nil || !reflect.DeepEqual(again, r) {
				t.Fatalf("result does not round-trip: %+v → %+v, %v", r, again, err)
			}
		}
		return
	}
	r, err := parseRequest(typ, body)
	// A request either does not parse (the connection closes) or is a bad
	// call (answered): never both, and nothing else.
	if malformed, bad := errors.Is(err, ErrMalformed), errors.Is(err, ringlimit.ErrInvalidRule); err != nil && malformed == bad {
		t.Fatalf("request error %v: malformed %v, bad call %v", err, malformed, bad)
	}
	if err != nil {
		return
	}
	// Whatever parses re-encodes to the same bytes.
	if got := appendRequest(nil, 0, &r)[headerLen:]; string(got) != string(body) && r.Rule.Window%time.Millisecond == 0 {
		t.Fatalf("request does not round-trip: %x → %x", body, got)
	}
}

// A duration too large for the wire saturates to the largest Duration, in
// both directions: the caller gets it, with no error, and the connection
// stays up.
func TestWireDurationsSaturate(t *testing.T) {
	// An encoded count of milliseconds beyond a Duration (the fuzz corpus
	// holds one too) parses, saturated.
	b := appendResult(nil, 1, &Result{})
	binary.BigEndian.PutUint64(b[headerLen+3+8*3:], 1<<62)
	binary.BigEndian.PutUint64(b[headerLen+3+8*2:], uint64(math.MaxInt64))
	r, err := parseResult(b[headerLen:])
	if err != nil || r.Decision.ResetAfter != math.MaxInt64 || r.Decision.RetryAfter != math.MaxInt64 {
		t.Fatalf("overflowing durations: %+v, %v", r.Decision, err)
	}
	// Over a real link: an owner's saturated answer arrives saturated, and
	// the next call uses the same connection.
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: handlerFunc(func(*Request) Result {
		return Result{Decision: ringlimit.Decision{RetryAfter: math.MaxInt64, ResetAfter: math.MaxInt64, Delay: 3 * time.Millisecond}}
	})})
	defer s.Close()
	c := newClient(t, s.Addr().String(), secret, time.Second)
	for range 3 {
		res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
		if err != nil || res.Decision.RetryAfter != math.MaxInt64 || res.Decision.ResetAfter != math.MaxInt64 || res.Decision.Delay != 3*time.Millisecond {
			t.Fatalf("%+v, %v", res.Decision, err)
		}
	}
	if st := s.Stats(); st.RejectedFrames != 0 || c.Stats().RejectedFrames != 0 {
		t.Fatalf("a saturated duration was rejected: %+v %+v", st, c.Stats())
	}
}

type handlerFunc func(*Request) Result

func (f handlerFunc) Serve(_ context.Context, r *Request) Result { return f(r) }
