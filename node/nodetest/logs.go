package nodetest

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// LogOnFailure returns a logger whose records are kept in memory and
// printed with t.Log when t has failed by the time it ends: a starved
// machine's view changes, timeouts and fail-open decisions, for the failure
// that needs them, and no noise otherwise.
func LogOnFailure(t testing.TB) *slog.Logger {
	lb := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("the nodes' log:\n" + lb.String())
		}
	})
	return slog.New(slog.NewTextHandler(lb, nil))
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
