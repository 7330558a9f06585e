package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// truthHandler denies everything with a decision that depends on the key
// only, so a caller can tell the owner's answer from an altered one, and
// counts how often it served each key. OpTake answers with a state that
// carries the key.
type truthHandler struct {
	mu     sync.Mutex
	served map[string]int
}

func truth(key string) ringlimit.Decision {
	var h int64
	for _, c := range []byte(key) {
		h = h*31 + int64(c)
	}
	return ringlimit.Decision{Allowed: false, Limit: 5, Remaining: h & 0xffff, RetryAfter: time.Duration(h&0xff) * time.Millisecond, Source: ringlimit.Local}
}

func (h *truthHandler) Serve(_ context.Context, r *Request) Result {
	h.mu.Lock()
	if h.served == nil {
		h.served = map[string]int{}
	}
	h.served[r.Key]++
	h.mu.Unlock()
	if r.Op == OpTake {
		return Result{State: []byte("state of " + r.Key)}
	}
	return Result{Decision: truth(r.Key)}
}

func (h *truthHandler) servedTwice() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.served {
		if c > 1 {
			n++
		}
	}
	return n
}

// tamper returns a proxy fault that changes the third record in direction
// dir (and, to reorder, the fourth) of the first connection.
func tamper(kind string, dir int) func(int, int, []byte) [][]byte {
	var mu sync.Mutex
	var held []byte
	fired := false
	return func(d, i int, rec []byte) [][]byte {
		mu.Lock()
		defer mu.Unlock()
		if d != dir || fired && held == nil {
			return [][]byte{rec}
		}
		fired = fired || i == 2
		switch {
		case i == 2 && kind == "flip":
			// Byte 15 of a result frame is Allowed; of a request, in
			// the rule's limit.
			rec[4+15] ^= 1
		case i == 2 && kind == "replay":
			return [][]byte{rec, rec}
		case i == 2 && kind == "drop":
			return nil
		case i == 2 && kind == "reorder":
			held = rec
			return nil
		case i == 3 && kind == "reorder":
			r := [][]byte{rec, held}
			held = nil
			return r
		}
		return [][]byte{rec}
	}
}

type tamperRun struct {
	altered, ok, failed int
	servedTwice         int
	clientRejected      uint64
	serverRejected      uint64
	lastErr             error
}

// runTampered makes 12 calls, each on its own key, through a proxy that
// applies fault, and reports what the caller saw.
func runTampered(t *testing.T, key []byte, fault func(int, int, []byte) [][]byte) tamperRun {
	h := &truthHandler{}
	s := Serve(listen(t), ServerConfig{Secret: key, Handler: h})
	defer s.Close()
	p := startProxy(t, s.Addr().String(), fault)
	c := NewClient(ClientConfig{Addr: p.addr(), Secret: key, Timeout: 300 * time.Millisecond})
	defer c.Close()
	var run tamperRun
	for i := range 12 {
		k := fmt.Sprintf("user:%d", i)
		res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: k, Rule: rule, N: 1})
		run.lastErr = err
		switch {
		case err != nil:
			run.failed++
		case res.Decision != truth(k):
			run.altered++
		default:
			run.ok++
		}
	}
	run.servedTwice = h.servedTwice()
	// The server closes a connection before it counts the record that
	// broke it, so a descheduled reader can count it after the calls
	// above are done: closing the server waits for every reader.
	c.Close()
	p.close()
	s.Close()
	run.clientRejected = c.Stats().RejectedFrames
	run.serverRejected = s.Stats().RejectedFrames
	return run
}

// An on-path proxy without the secret flips a byte, replays, drops or
// reorders a record in either direction: the caller never gets an altered
// decision, no request is served twice, the record is rejected, and the
// calls after it succeed on a new connection.
func TestTamperedRecordsNeverYieldADecision(t *testing.T) {
	for _, kind := range []string{"flip", "replay", "drop", "reorder"} {
		for _, dir := range []int{toServer, toClient} {
			name := kind + []string{"/to-server", "/to-client"}[dir]
			t.Run(name, func(t *testing.T) {
				run := runTampered(t, secret, tamper(kind, dir))
				t.Logf("%+v", run)
				if run.altered > 0 || run.servedTwice > 0 {
					t.Fatalf("%d altered decisions, %d requests served twice", run.altered, run.servedTwice)
				}
				rejected := run.serverRejected
				if dir == toClient {
					rejected = run.clientRejected
				}
				if rejected == 0 {
					t.Fatalf("no record rejected")
				}
				// A replayed answer arrives after its call is done: it
				// costs the idle connection, not a call.
				if run.failed > 3 || run.failed == 0 && kind != "replay" {
					t.Fatalf("%d calls failed, want 1 to 3 (those in flight at the fault)", run.failed)
				}
				if run.lastErr != nil {
					t.Fatalf("the link did not recover: %v", run.lastErr)
				}
			})
		}
	}
}

// The same proxy against a link in clear does alter decisions and replay
// requests: it is a real attacker, and the sealing above is what stops it.
func TestTamperingWorksInClear(t *testing.T) {
	if run := runTampered(t, nil, tamper("flip", toClient)); run.altered == 0 {
		t.Fatalf("a flipped result byte altered nothing in clear: %+v", run)
	}
	if run := runTampered(t, nil, tamper("replay", toServer)); run.servedTwice == 0 {
		t.Fatalf("a replayed request was not served twice in clear: %+v", run)
	}
}

// A distinctive key never appears on the wire in either direction with a
// secret; in clear it does in both (so the capture sees what it should).
func TestKeysNeverOnTheWire(t *testing.T) {
	const key = "api-key:7f3a9c2e-distinctive"
	for _, tc := range []struct {
		name   string
		secret []byte
	}{{"sealed", secret}, {"clear", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			s := Serve(listen(t), ServerConfig{Secret: tc.secret, Handler: &truthHandler{}})
			defer s.Close()
			p := startProxy(t, s.Addr().String(), nil)
			c := NewClient(ClientConfig{Addr: p.addr(), Secret: tc.secret, Timeout: time.Second})
			defer c.Close()
			for _, r := range []Request{{Op: OpAllow, Key: key, Rule: rule, N: 1}, {Op: OpTake, Key: key, From: "n1"},
				{Op: OpStates, States: []Item{{Key: key, Value: []byte(key)}}}} {
				if _, err := c.Do(context.Background(), &r); err != nil {
					t.Fatal(err)
				}
			}
			c.Close()
			p.close()
			for dir, what := range []string{"to the server", "to the client"} {
				seen := bytes.Contains(p.captured(dir), []byte(key))
				if seen != (tc.secret == nil) {
					t.Errorf("key on the wire %s: %v", what, seen)
				}
			}
		})
	}
}

// The client chooses the highest version both sides speak, and the proofs
// cover it; a client of version 1 (frames in clear) is refused.
func TestHandshakeVersions(t *testing.T) {
	// A server from the future speaks up to version 9.
	ln := listen(t)
	done := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- nil
			return
		}
		defer c.Close()
		c.Write(append(append([]byte("RLP\x09"), make([]byte, nonceLen)...), 0))
		in := make([]byte, len(magic)+1+nonceLen+32)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(in); err != nil {
			done <- nil
			return
		}
		done <- in
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	clientHandshake(nc, secret, "", time.Second) // fails: the server proves nothing
	nc.Close()
	in := <-done
	ln.Close()
	if in == nil || in[3] != Version {
		t.Fatalf("client answered a version-9 server with %v, want version %d", in, Version)
	}

	// A version-1 client is refused, and counted.
	s, _ := startServer(t, secret)
	nc, err = net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	g := make([]byte, len(magic)+1+nonceLen+1)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Read(g); err != nil {
		t.Fatal(err)
	}
	v1 := append([]byte("RLP\x01"), make([]byte, nonceLen)...)
	nc.Write(append(v1, mac(secret, "client", 1, g[4:4+nonceLen], make([]byte, nonceLen))...))
	if n, err := nc.Read(make([]byte, 64)); err == nil {
		t.Fatalf("a version-1 client got %d bytes", n)
	}
	waitFor(t, func() bool { return s.Stats().RefusedAuth == 1 })
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond) // polling, with a deadline
	}
}

var _ = errors.Is
