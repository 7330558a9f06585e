package node_test

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/ringlimit/ringlimit/node"
)

var traceDir = flag.String("trace", "", "write each node's hand-off trace (its Debug log) to DIR/NAME.log (the load tests)")

// traceSeq orders the trace lines of every node in the process.
var traceSeq atomic.Uint64

// seqHandler adds a seq attribute, in the order lines are logged.
type seqHandler struct{ slog.Handler }

func (h seqHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(slog.Uint64("seq", traceSeq.Add(1)))
	return h.Handler.Handle(ctx, r)
}

func (h seqHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return seqHandler{h.Handler.WithAttrs(as)}
}
func (h seqHandler) WithGroup(g string) slog.Handler { return seqHandler{h.Handler.WithGroup(g)} }

// traced sends cfg's node's Debug log to -trace's folder, if set.
func traced(t *testing.T, cfg *node.Config) {
	if *traceDir == "" {
		return
	}
	f, err := os.OpenFile(filepath.Join(*traceDir, cfg.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cfg.Logger = slog.New(seqHandler{slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})})
}
