package peer

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// heapAlloc is the live heap after a collection.
func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// Connections that pass the handshake and then send only a record's
// length, the largest a record may have (4 MiB), cost the server what
// they sent, not what they announced: its buffers grow as bytes arrive.
// Before, each such length allocated its record whole (issue 28: 200
// connections, 1.47 GB).
//
// The bound: per connection, the server's reader buffer (startBuf, 4 KiB)
// and the two ends' connection state (sealers, structs: a few KiB; 7.5 KiB
// measured, with the race detector too) under 32 KiB; 64 connections so
// under 2 MiB, where announced records took 256 MiB (262,881 KiB measured
// before the fix).
func TestAnnouncedLengthsCostNoMemory(t *testing.T) {
	const conns, perConn = 64, 32 << 10
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: &truthHandler{}, BodyTimeout: time.Minute})
	defer s.Close()
	base := heapAlloc()
	for range conns {
		nc, _ := rawConn(t, s)
		if _, err := nc.Write(binary.BigEndian.AppendUint32(nil, maxRecord)); err != nil {
			t.Fatal(err)
		}
	}
	// Every connection's reader has read its length and counted it.
	waitFor(t, func() bool { return s.pending.Load() == conns*maxRecord })
	grown := heapAlloc() - base
	t.Logf("%d connections announcing %d bytes each: heap %+d KiB (bound %d KiB)", conns, maxRecord, grown>>10, conns*perConn>>10)
	if grown > conns*perConn {
		t.Fatalf("heap grew by %d KiB for %d announced lengths, over %d KiB", grown>>10, conns, conns*perConn>>10)
	}
}

// A record's announced length counts against its connection's
// MaxInFlightBytes before its body is read: with the bodies being served
// and the announced length over the bound, the reader waits (and reads no
// body) until they are answered; then the record is read and served.
func TestAnnouncedLengthCountsInFlight(t *testing.T) {
	h := &keyedBlocker{release: make(chan struct{}), all: true}
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: h, MaxInFlightBytes: 3000})
	defer s.Close()
	nc, tx, rd := rawLink(t, s)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	held := appendRequest(nil, 1, &Request{Op: OpStates, States: []Item{{Key: "k", Value: make([]byte, 990)}}})
	if _, err := nc.Write(record(tx, held)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return h.held.Load() == 1 })
	// 1,031 bytes in flight; a record of 2,131 more is announced: over
	// 3,000, so its length alone makes the reader wait.
	big := record(tx, appendRequest(nil, 2, &Request{Op: OpStates, States: []Item{{Key: "k", Value: make([]byte, 2090)}}}))
	if _, err := nc.Write(big[:4]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return s.readerWaits.Load() > 0 })
	if got := h.held.Load(); got != 1 {
		t.Fatalf("%d requests held, want 1", got)
	}
	close(h.release)
	if _, err := nc.Write(big[4:]); err != nil {
		t.Fatal(err)
	}
	for want := range 2 {
		_, id, body, err := rd.next()
		if err != nil {
			t.Fatalf("answer %d: %v", want, err)
		}
		if _, err := parseResult(body); err != nil || id != uint64(want+1) {
			t.Fatalf("answer %d: id %d, %v", want, id, err)
		}
	}
	waitFor(t, func() bool { return s.pending.Load() == 0 })
}

// A sender's name of 255 bytes, the longest a frame carries, parses back:
// the offset past it is 256, which a byte cannot hold (1+body[0] wrapped to
// 0 and the parser panicked on a slice [1:0]).
func TestLongestFromParses(t *testing.T) {
	from := strings.Repeat("n", 255)
	rule := ringlimit.Rule{Limit: 1, Window: time.Second}
	for _, r := range []Request{
		{Op: OpTake, Key: "k", From: from},
		{Op: OpAllow, Key: "k", From: from, Rule: rule, N: 1},
		{Op: OpAllowAll, Key: "k", From: from, Rules: []ringlimit.Rule{rule}, N: 1},
	} {
		b := appendRequest(nil, 1, &r)
		typ, _, n, err := parseHeader(b[:headerLen])
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseRequest(typ, b[headerLen:headerLen+n])
		if err != nil || got.From != from || got.Key != "k" {
			t.Fatalf("op %d: from of %d bytes, key %q, %v", r.Op, len(got.From), got.Key, err)
		}
	}
}
