package node

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ringlimit/ringlimit"
)

// syncBuffer is a bytes.Buffer safe for the node's goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A warning that repeats (here a peer sending hand-off messages that do
// not decode)
// is written once, and the rest are counted and summarised in one line by
// Close: a flood of bad hand-offs cannot flood the log.
func TestRepeatedWarningsAreSummarised(t *testing.T) {
	var buf syncBuffer
	n, err := New(Config{Name: "a", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	bad := holdRequest(&holdMsg{kind: holdPush, from: "b", items: []pushItem{{key: "k", st: ringlimit.State{Until: 1 << 50}}}})
	bad.States[1].Value = bad.States[1].Value[:20] // cut inside the version
	for range 50 {
		if res := n.serveHold(bad.States); res.Err == nil {
			t.Fatal("a malformed push was accepted")
		}
	}
	if got := strings.Count(buf.String(), "bad hand-off message"); got != 1 {
		t.Fatalf("%d lines of the warning before the summary, want 1:\n%s", got, buf.String())
	}
	n.Close()
	out := buf.String()
	if !strings.Contains(out, "bad hand-off message (repeated)") || !strings.Contains(out, "suppressed=49") {
		t.Fatalf("no summary of the 49 repeats after Close:\n%s", out)
	}
	if n.local.Has("k") {
		t.Fatal("a bad state was installed")
	}
}
