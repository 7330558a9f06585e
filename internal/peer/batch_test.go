package peer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tapConn records, for the connections a client dials, the goroutine of
// each read and write and the bytes of each write; a write can be made to
// wait at a gate.
type tapConn struct {
	net.Conn
	t *tap
}

type tap struct {
	mu     sync.Mutex
	writes [][]byte
	readG  map[uint64]int // goroutine → reads that returned bytes
	writeG map[uint64]int // goroutine → writes
	gate   chan struct{}  // if not nil, the next write waits for it
	gated  chan struct{}  // closed when a write waits at the gate
}

func (tp *tap) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &tapConn{Conn: nc, t: tp}, nil
}

// goid is the calling goroutine's id.
func goid() uint64 {
	var b [64]byte
	s := strings.TrimPrefix(string(b[:runtime.Stack(b[:], false)]), "goroutine ")
	id, _ := strconv.ParseUint(s[:strings.IndexByte(s, ' ')], 10, 64)
	return id
}

func (c *tapConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.t.mu.Lock()
		c.t.readG[goid()]++
		c.t.mu.Unlock()
	}
	return n, err
}

func (c *tapConn) Write(b []byte) (int, error) {
	c.t.mu.Lock()
	gate, gated := c.t.gate, c.t.gated
	c.t.gate = nil
	c.t.writes = append(c.t.writes, append([]byte(nil), b...))
	c.t.writeG[goid()]++
	c.t.mu.Unlock()
	if gate != nil {
		close(gated)
		<-gate
	}
	return c.Conn.Write(b)
}

func newTap() *tap { return &tap{readG: map[uint64]int{}, writeG: map[uint64]int{}} }

// reset forgets what was recorded.
func (tp *tap) reset() {
	tp.mu.Lock()
	tp.writes, tp.readG, tp.writeG = nil, map[uint64]int{}, map[uint64]int{}
	tp.mu.Unlock()
}

// records splits a write into its records' lengths.
func records(t *testing.T, w []byte) []int {
	var lens []int
	for len(w) > 0 {
		if len(w) < 4 {
			t.Fatalf("a write ends inside a record's length")
		}
		n := int(binary.BigEndian.Uint32(w))
		if len(w) < 4+n {
			t.Fatalf("a write ends inside a record")
		}
		lens, w = append(lens, n), w[4+n:]
	}
	return lens
}

// A lone call writes its own frame and reads its own answer: no other
// goroutine of the client touches the connection, so the answer wakes the
// call that waits for it and nothing else.
func TestLoneCallReadsItsOwnAnswer(t *testing.T) {
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: &truthHandler{}})
	defer s.Close()
	tp := newTap()
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 10 * time.Second, Dial: tp.dial})
	defer c.Close()
	if _, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "warm", Rule: rule, N: 1}); err != nil {
		t.Fatal(err)
	}
	tp.reset()
	me := goid()
	for i := range 50 {
		k := fmt.Sprint("k", i)
		res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: k, Rule: rule, N: 1})
		if err != nil || res.Decision != truth(k) {
			t.Fatalf("call %d: %+v, %v", i, res, err)
		}
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if len(tp.readG) != 1 || tp.readG[me] == 0 || len(tp.writeG) != 1 || tp.writeG[me] != 50 {
		t.Fatalf("reads by goroutine %v, writes %v; want all on the caller's, %d", tp.readG, tp.writeG, me)
	}
}

// Calls made while a write is in flight go out together in the next
// write, and with version 3 in one record: one seal for all of them. A
// server of version 2 gets the same calls in one write, a record each.
func TestCallsDuringAWriteGoOutTogether(t *testing.T) {
	for _, v := range []byte{Version, 2} {
		t.Run(fmt.Sprint("server version ", v), func(t *testing.T) {
			h := &keyedBlocker{release: make(chan struct{})}
			s := Serve(listen(t), ServerConfig{Secret: secret, Handler: h, version: v})
			defer s.Close()
			tp := newTap()
			c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 10 * time.Second, Dial: tp.dial})
			defer c.Close()
			if _, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "warm", Rule: rule, N: 1}); err != nil {
				t.Fatal(err)
			}
			// A slow call in flight, so that the next are not alone; its
			// write waits at the gate while n calls queue behind it.
			tp.reset()
			tp.mu.Lock()
			tp.gate, tp.gated = make(chan struct{}), make(chan struct{})
			gate, gated := tp.gate, tp.gated
			tp.mu.Unlock()
			slow := make(chan error, 1)
			go func() {
				_, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "slow", Rule: rule, N: 1})
				slow <- err
			}()
			<-gated
			const n = 8
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					k := fmt.Sprint("fast", i)
					res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: k, Rule: rule, N: 1})
					if err != nil || res.Decision != truth(k) {
						t.Errorf("%s: %+v, %v", k, res, err)
					}
				}()
			}
			c.mu.Lock()
			cn := c.cn
			c.mu.Unlock()
			waitFor(t, func() bool {
				cn.wr.mu.Lock()
				defer cn.wr.mu.Unlock()
				return cn.wr.frames == n
			})
			close(gate)
			wg.Wait()
			tp.mu.Lock()
			writes := tp.writes
			tp.mu.Unlock()
			if len(writes) != 2 {
				t.Fatalf("%d writes for a gated call and %d behind it, want 2", len(writes), n)
			}
			recs := records(t, writes[1])
			if want := map[byte]int{Version: 1, 2: n}[v]; len(recs) != want {
				t.Fatalf("the %d calls went out in %d records, want %d", n, len(recs), want)
			}
			close(h.release)
			if err := <-slow; err != nil {
				t.Fatal(err)
			}
			if st := s.Stats(); st.RejectedFrames != 0 || c.Stats().RejectedFrames != 0 {
				t.Fatalf("frames rejected: %+v, %+v", st, c.Stats())
			}
		})
	}
}

// A call goes out at once whatever is in flight: with many calls waiting
// for answers that do not come, each new call is written, answered and
// returned without any of those answers.
func TestCallsNeverWaitForOtherAnswers(t *testing.T) {
	h := &keyedBlocker{release: make(chan struct{})}
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: h})
	defer s.Close()
	tp := newTap()
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: time.Hour, Dial: tp.dial})
	defer c.Close()
	slow := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "slow", Rule: rule, N: 1})
			slow <- err
		}()
	}
	waitFor(t, func() bool { return h.held.Load() == 8 })
	tp.reset()
	for i := range 20 {
		k := fmt.Sprint("fast", i)
		res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: k, Rule: rule, N: 1})
		if err != nil || res.Decision != truth(k) {
			t.Fatalf("%s behind 8 unanswered calls: %+v, %v", k, res, err)
		}
	}
	tp.mu.Lock()
	if len(tp.writes) != 20 {
		t.Errorf("%d writes for 20 calls made one after another", len(tp.writes))
	}
	tp.mu.Unlock()
	if h.held.Load() != 8 {
		t.Fatal("a slow call was answered")
	}
	close(h.release)
	for range 8 {
		if err := <-slow; err != nil {
			t.Fatal(err)
		}
	}
}

// jitterHandler answers each key's truth after a delay of up to max,
// drawn per request, on a worker: answers come back out of order.
type jitterHandler struct{ max time.Duration }

func (h jitterHandler) Serve(ctx context.Context, r *Request) Result {
	if d := rand.N(h.max + 1); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return Result{Decision: truth(r.Key)}
}

// Many callers, answers out of order, calls that time out and contexts
// that end before, during and after their calls: the turn to read passes
// from call to call, every answer a call returns is its own, and the
// connection carries on.
func TestTurnsSurviveTimeoutsAndCancels(t *testing.T) {
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: jitterHandler{max: 3 * time.Millisecond}})
	defer s.Close()
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: time.Second})
	defer c.Close()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				k := fmt.Sprintf("g%d-%d", g, i)
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				timeout := time.Second
				switch i % 5 {
				case 1:
					ctx, cancel = context.WithCancel(context.Background())
					cancel() // ended before the call
				case 2:
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.N(3000))*time.Microsecond)
				case 3:
					timeout = time.Duration(1+rand.N(3000)) * time.Microsecond
				}
				res, err := c.DoTimeout(ctx, &Request{Op: OpAllow, Key: k, Rule: rule, N: 1}, timeout)
				cancel()
				switch {
				case err == nil && res.Decision != truth(k):
					t.Errorf("%s: another call's answer %+v", k, res.Decision)
				case err == nil:
					ok.Add(1)
				case errors.Is(err, ErrTimeout) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
					failed.Add(1)
				default:
					t.Errorf("%s: %v", k, err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d answered, %d gave up", ok.Load(), failed.Load())
	if ok.Load() < 32*150*2/5 {
		t.Fatalf("only %d of the calls that wait long enough were answered", ok.Load())
	}
	for i := range 10 {
		k := fmt.Sprint("after", i)
		if res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: k, Rule: rule, N: 1}); err != nil || res.Decision != truth(k) {
			t.Fatalf("after the storm: %+v, %v", res, err)
		}
	}
	if st := s.Stats(); st.RejectedFrames != 0 || c.Stats().RejectedFrames != 0 {
		t.Fatalf("frames rejected: %+v, %+v", st, c.Stats())
	}
}

// The reader of a call whose context ends is woken at once, not at its
// timeout.
func TestCancelWakesTheReader(t *testing.T) {
	h := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: h})
	defer s.Close()
	defer close(h.release)
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: time.Hour})
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
		done <- err
	}()
	<-h.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// A connection the server closed while no call was in flight (nobody
// reads it then) is found closed by the next call, which dials again
// instead of failing.
func TestPeerCloseFoundBeforeTheNextCall(t *testing.T) {
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: &truthHandler{}, IdleTimeout: 100 * time.Millisecond})
	defer s.Close()
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 10 * time.Second})
	defer c.Close()
	for i := range 3 {
		if _, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		waitFor(t, func() bool { return s.Stats().IdleClosed == uint64(i+1) })
	}
}

// A client and a server of version 3 speak version 2 to a node of the
// previous release, in either role: a record a frame both ways (each side
// reads a version-2 connection strictly, and would reject a record of
// several), under enough concurrency that version 3 would batch.
func TestVersion2Peers(t *testing.T) {
	for _, tc := range []struct {
		name           string
		client, server byte
	}{{"old client", 2, Version}, {"old server", Version, 2}, {"both new", Version, Version}} {
		t.Run(tc.name, func(t *testing.T) {
			s := Serve(listen(t), ServerConfig{Secret: secret, Handler: jitterHandler{max: time.Millisecond}, version: tc.server})
			defer s.Close()
			tp := newTap()
			c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 10 * time.Second, Dial: tp.dial})
			c.version = tc.client
			defer c.Close()
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 100 {
						k := fmt.Sprintf("g%d-%d", g, i)
						res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: k, Rule: rule, N: 1})
						if err != nil || res.Decision != truth(k) {
							t.Errorf("%s: %+v, %v", k, res, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if st := s.Stats(); st.RejectedFrames != 0 || c.Stats().RejectedFrames != 0 {
				t.Fatalf("frames rejected: %+v, %+v", st, c.Stats())
			}
			recs := 0
			tp.mu.Lock()
			for _, w := range tp.writes[1:] { // after the handshake's
				recs += len(records(t, w))
			}
			tp.mu.Unlock()
			// A record a call, unless both speak version 3: then calls
			// made during a write share a record (a few, at least, of
			// 3,200 made by 32 callers at once).
			batched := recs < 32*100
			if want := tc.client >= 3 && tc.server >= 3; batched != want {
				t.Fatalf("%d records for %d calls: batched %v, want %v", recs, 32*100, batched, want)
			}
		})
	}
}

// bufConn is a net.Conn that keeps what is written to it.
type bufConn struct {
	net.Conn
	bytes.Buffer
}

func (c *bufConn) Write(b []byte) (int, error)      { return c.Buffer.Write(b) }
func (c *bufConn) Read(b []byte) (int, error)       { return c.Buffer.Read(b) }
func (c *bufConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzRecords checks the records of version 3 both ways. As a reader's
// input, b is the payload of one sealed record: a reader returns its
// frames in order, each exactly as encoded, or fails (closing the
// connection) on a payload that is not whole frames; a reader of version 2
// returns a frame only from a record it fills; the frames' shares of the
// record add up to the record. As a writer's input, b is a run of frames
// (a length byte and a body each): what a batching writer flushes, sealed,
// reads back as the same frames in the same order, in records of at most
// batchMax unless a frame is alone.
func FuzzRecords(f *testing.F) {
	two := append(appendRequest(nil, 1, &Request{Op: OpReset, Key: "k"}), appendRequest(nil, 2, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})...)
	f.Add(two)
	f.Add(appendResult(two, 3, &Result{MovedTo: "n2"}))
	f.Add(two[:len(two)-1])
	f.Add([]byte{3, 'a', 'b', 'c', 0, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, single := range []bool{false, true} {
			tx, rx := fuzzKeys()
			w := writer{seal: tx}
			rec := w.record(nil, b)
			if len(b) < headerLen || len(rec)-4 > maxRecord {
				continue // no record that short or long is read
			}
			admitted := 0
			rd := reader{c: fuzzConn{bytes.NewReader(rec)}, open: rx, single: single, admit: func(n int) { admitted += n }}
			var again []byte
			shares, got := 0, 0
			for {
				typ, id, body, err := rd.next()
				if err != nil {
					break
				}
				got++
				shares += rd.size
				again = append(appendHeader(again, typ, id, len(body)), body...)
			}
			if !bytes.HasPrefix(b, again) {
				t.Fatalf("frames read are not the record's: %x of %x", again, b)
			}
			if len(again) == len(b) && shares != admitted {
				t.Fatalf("the frames account for %d bytes of a record of %d", shares, admitted)
			}
			if (single || len(b) > batchMax) && got > 1 {
				t.Fatalf("%d frames from one record of %d bytes (version 2: %v)", got, len(b), single)
			}
		}

		// b as frames through a batching writer.
		var frames [][]byte
		var want []byte
		for p := b; len(p) > 0; {
			n := int(p[0])
			if n > len(p)-1 {
				n = len(p) - 1
			}
			if p[0] == 255 && len(p) > 1 { // now and then a frame too large to share a record
				n = smallFrame + int(p[1])
			}
			body := p[1 : 1+min(n, len(p)-1)]
			if n > len(body) {
				body = append(bytes.Repeat([]byte{7}, n-len(body)), body...)
			}
			fr := append(appendHeader(nil, typeReset, uint64(len(frames)), len(body)), body...)
			frames, want = append(frames, fr), append(want, fr...)
			p = p[1+min(n, len(p)-1):]
		}
		if len(frames) == 0 {
			return
		}
		tx, rx := fuzzKeys()
		w := writer{seal: tx, batch: true}
		nc := &bufConn{}
		w.mu.Lock()
		for _, fr := range frames {
			st := w.begin()
			w.buf = append(w.buf, fr...)
			w.end(st)
		}
		if err := w.flush(nc, time.Second); err != nil {
			t.Fatal(err)
		}
		rd := reader{c: fuzzConn{bytes.NewReader(nc.Bytes())}, open: rx}
		var got []byte
		var rec []int // the frames of the record being read
		for range frames {
			typ, id, body, err := rd.next()
			if err != nil {
				t.Fatalf("reading back %d frames: %v", len(frames), err)
			}
			got = append(appendHeader(got, typ, id, len(body)), body...)
			rec = append(rec, headerLen+len(body))
			if len(rd.rest) > 0 {
				continue
			}
			if len(rec) > 1 {
				sum := 0
				for _, n := range rec {
					sum += n
					if n > smallFrame {
						t.Fatalf("a frame of %d bytes shares a record", n)
					}
				}
				if sum > batchMax {
					t.Fatalf("a record of %d frames holds %d bytes", len(rec), sum)
				}
			}
			rec = rec[:0]
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frames written and read back differ")
		}
	})
}
