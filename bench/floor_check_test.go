package bench

import (
	"net"
	"strings"
	"testing"
)

// The multiplexed floor hands every answer to the caller that sent it: each
// caller checks that its answer carries its own id and call number.
func TestMuxFloorAnswersEachCaller(t *testing.T) {
	echo := startEcho(t)
	m := newMuxClient(echo.dial(t))
	defer m.close()
	if _, err := muxFloor(m, 32*200); err != nil {
		t.Fatal(err)
	}
}

// A connection that ends fails the callers waiting on it instead of
// leaving them blocked.
func TestMuxFloorDeadConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	m := newMuxClient(c)
	defer m.close()
	if _, err := muxFloor(m, 1000); err == nil {
		t.Fatal("calls on a closed connection succeeded")
	}
}

// The benchmark counts only calls its owner decided: a key the caller owns
// (Source Local) fails both measurements; a key a peer owns passes.
func TestFloorCountsOnlyForwarded(t *testing.T) {
	nodes := startSealed(t)
	a := nodes[0]
	own, peer := keysOf(a, a.Name(), 8), keysOf(a, nodes[1].Name(), 8)
	if _, err := seqRinglimit(a, peer, 100); err != nil {
		t.Fatalf("keys of a peer, 1 caller: %v", err)
	}
	if _, err := muxRinglimit(a, peer, 320); err != nil {
		t.Fatalf("keys of a peer, 32 callers: %v", err)
	}
	if _, err := seqRinglimit(a, own, 100); err == nil || !strings.Contains(err.Error(), "not Peer") {
		t.Fatalf("own keys, 1 caller: %v, want a call not decided by a peer", err)
	}
	if _, err := muxRinglimit(a, own, 320); err == nil || !strings.Contains(err.Error(), "not Peer") {
		t.Fatalf("own keys, 32 callers: %v, want a call not decided by a peer", err)
	}
}
