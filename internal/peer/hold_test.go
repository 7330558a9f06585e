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

// Calls made while an earlier write's answer is due are held, and go out
// together in one write when it comes.
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
	w0 := wc.writes.Load()
	slow := make(chan error, 1)
	go func() {
		_, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "slow", Rule: rule, N: 1})
		slow <- err
	}()
	waitFor(t, func() bool { return h.held.Load() == 1 })
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
		t.Fatalf("%d writes while %d calls wait for the slow answer, want 1 (the slow call's)", got, n)
	}
	close(h.release)
	if err := <-slow; err != nil {
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
	slow := make(chan error, 1)
	go func() {
		_, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: "slow", Rule: rule, N: 1})
		slow <- err
	}()
	waitFor(t, func() bool { return h.held.Load() == 1 })
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
	if h.held.Load() != 1 {
		t.Fatal("the slow request finished early")
	}
	close(h.release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}
