package peer

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// writeCounter counts the writes on the connections it dials.
type writeCounter struct{ writes atomic.Int64 }

func (w *writeCounter) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: nc, w: w}, nil
}

type countedConn struct {
	net.Conn
	w *writeCounter
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.w.writes.Add(1)
	return c.Conn.Write(b)
}

// slowCalls makes n calls on "slow" in the background (the server holds
// them until released), one at a time: each is held by the server before
// the next is made, so each goes out in a write of its own. The channel
// gets their errors.
func slowCalls(t *testing.T, c *Client, h *keyedBlocker, n int) chan error {
	t.Helper()
	errs := make(chan error, n)
	for range n {
		before := h.held.Load()
		go func() {
			_, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "slow", Rule: rule, N: 1})
			errs <- err
		}()
		waitFor(t, func() bool { return h.held.Load() == before+1 })
	}
	return errs
}

// Calls made while holdMin earlier calls' answers are due are held, and go
// out together in one write when the answers come; with fewer due, a call
// goes out at once.
func TestHeldCallsGoOutInOneWrite(t *testing.T) {
	h := &keyedBlocker{release: make(chan struct{})}
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: h})
	defer s.Close()
	var wc writeCounter
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 10 * time.Second, Dial: wc.dial})
	c.hold = time.Minute // only the answer writes them
	defer c.Close()
	// Dial first, so that the slow call's write is the connection's last.
	if _, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "warm", Rule: rule, N: 1}); err != nil {
		t.Fatal(err)
	}
	// Below holdMin calls in flight, nothing is held.
	w0 := wc.writes.Load()
	slow := slowCalls(t, c, h, holdMin-1)
	if _, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "fast", Rule: rule, N: 1}); err != nil {
		t.Fatal(err)
	}
	if c.held.Load() != 0 || wc.writes.Load()-w0 != holdMin {
		t.Fatalf("%d calls held, %d writes with %d in flight", c.held.Load(), wc.writes.Load()-w0, holdMin-1)
	}
	w0 = wc.writes.Load()
	slow2 := slowCalls(t, c, h, 1)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "fast", Rule: rule, N: 1})
			if err == nil && res.Decision != truth("fast") {
				t.Errorf("fast: %+v", res)
			}
			errs <- err
		}()
	}
	waitFor(t, func() bool { return c.held.Load() == n })
	if got := wc.writes.Load() - w0; got != 1 {
		t.Fatalf("%d writes while %d calls wait for the slow answers, want 1 (the last slow call's)", got, n)
	}
	close(h.release)
	for range holdMin - 1 {
		if err := <-slow; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-slow2; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := wc.writes.Load() - w0; got != 2 {
		t.Fatalf("%d writes for a slow call and %d held behind it, want 2", got, n)
	}
	if h.served.Load() != holdMin+1+n+1 {
		t.Fatalf("served %d", h.served.Load())
	}
}

// A call held for an answer that does not come goes out after the hold:
// a slow answer delays the calls behind it by the hold at most.
func TestHoldIsBounded(t *testing.T) {
	h := &keyedBlocker{release: make(chan struct{})}
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: h})
	defer s.Close()
	c := NewClient(ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 10 * time.Second})
	const hold = 50 * time.Millisecond
	c.hold = hold
	defer c.Close()
	if _, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "warm", Rule: rule, N: 1}); err != nil {
		t.Fatal(err)
	}
	slow := slowCalls(t, c, h, holdMin)
	// Calls within the hold of the slow write are held; once past it,
	// written at once. Each is answered while the slow one is not.
	start := time.Now()
	for i := 0; time.Since(start) < 3*hold; i++ {
		if _, err := c.DoTimeout(context.Background(), &Request{Op: OpAllow, Key: "fast", Rule: rule, N: 1}, time.Second); err != nil {
			t.Fatalf("call %d, %s after the slow one: %v", i, time.Since(start), err)
		}
	}
	if c.held.Load() == 0 {
		t.Fatal("no call was held: the test did not reach the bound")
	}
	if h.held.Load() != holdMin {
		t.Fatal("a slow request finished early")
	}
	close(h.release)
	for range holdMin {
		if err := <-slow; err != nil {
			t.Fatal(err)
		}
	}
}
