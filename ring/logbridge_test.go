package ring

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ringlimit/ringlimit/internal/logsum"
)

type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r)
	h.mu.Unlock()
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func TestMemberlistLogBridge(t *testing.T) {
	h := &recordHandler{}
	sl := slog.New(h)
	l := memberlistLogger(sl, logsum.New(sl, 0))
	l.Printf("[DEBUG] memberlist: probing %s", "a")
	l.Printf("[WARN] memberlist: slow")
	l.Printf("[ERR] memberlist: broken")
	l.Printf("untagged")
	want := []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelDebug, "memberlist: probing a"},
		{slog.LevelWarn, "memberlist: slow"},
		{slog.LevelError, "memberlist: broken"},
		{slog.LevelInfo, "untagged"},
	}
	if len(h.records) != len(want) {
		t.Fatalf("got %d records, want %d", len(h.records), len(want))
	}
	for i, w := range want {
		if r := h.records[i]; r.Level != w.level || r.Message != w.msg {
			t.Errorf("record %d = %v %q, want %v %q", i, r.Level, r.Message, w.level, w.msg)
		}
	}

	if w := memberlistLogger(nil, nil).Writer(); w != io.Discard {
		t.Fatalf("without a Logger memberlist writes to %T, want io.Discard", w)
	}
}

// A Membership with a Logger gets memberlist's own logs through it.
func TestMembershipLogsThroughSlog(t *testing.T) {
	h := &recordHandler{}
	cfg := FastLocalConfig("logged")
	cfg.Logger = slog.New(h)
	m := start(t, cfg)
	m.Join([]string{"127.0.0.1:1"}) // fails, and memberlist logs why
	h.mu.Lock()
	defer h.mu.Unlock()
	var fromMemberlist, fromRing bool
	for _, r := range h.records {
		fromMemberlist = fromMemberlist || strings.HasPrefix(r.Message, "memberlist:")
		fromRing = fromRing || strings.HasPrefix(r.Message, "ring:")
	}
	if !fromMemberlist || !fromRing {
		t.Fatalf("logs from memberlist: %v, from ring: %v; want both", fromMemberlist, fromRing)
	}
}
