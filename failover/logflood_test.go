package failover_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), "\n")
}

// A store that fails every probe makes the breaker flap open → half-open →
// open every Cooldown: hundreds of changes give a few lines (one per kind
// of change per interval), not one line each.
func TestFlappingBreakerDoesNotFloodTheLog(t *testing.T) {
	var logs lockedBuffer
	primary := newFake()
	primary.failWith(errStoreDown)
	l := failover.New(primary, failover.Config{
		MaxFailures: 1,
		Cooldown:    time.Millisecond,
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
	})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for l.Stats().StateChanges < 300 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d changes of state in 10 s", l.Stats().StateChanges)
		}
		if _, err := l.AllowN(context.Background(), "k", rule, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := logs.lines(); n > 6 {
		t.Fatalf("%d changes of state wrote %d lines, want at most 6 (per kind of change, to open or to half-open: a line, and a summary if an interval ended)", l.Stats().StateChanges, n)
	}
}
