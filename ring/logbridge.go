package ring

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/ringlimit/ringlimit/internal/logsum"
)

// memberlistLogger returns the *log.Logger memberlist writes to: one that
// forwards each line to sum at the level memberlist tagged it with
// ("[DEBUG]", "[INFO]", "[WARN]", "[ERR]"), or that discards everything if
// l is nil. sum writes the first line of each kind (lineKind) per interval
// and counts the rest into one summary line: junk packets make memberlist
// log one line each ("discarding packet ...", "Decrypt packet failed ...").
func memberlistLogger(l *slog.Logger, sum *logsum.Summarizer) *log.Logger {
	if l == nil {
		return log.New(io.Discard, "", 0)
	}
	return log.New(slogWriter{l, sum}, "", 0)
}

type slogWriter struct {
	l   *slog.Logger // to skip, at once, lines its handler would drop
	sum *logsum.Summarizer
}

func (w slogWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, "\n"))
	level := slog.LevelInfo
	for _, t := range [...]struct {
		tag   string
		level slog.Level
	}{
		{"[DEBUG] ", slog.LevelDebug},
		{"[INFO] ", slog.LevelInfo},
		{"[WARN] ", slog.LevelWarn},
		{"[ERR] ", slog.LevelError},
		{"[ERROR] ", slog.LevelError},
	} {
		if rest, ok := strings.CutPrefix(msg, t.tag); ok {
			level, msg = t.level, rest
			break
		}
	}
	if !w.l.Enabled(context.Background(), level) {
		return len(p), nil
	}
	w.sum.Log(level, lineKind(level, msg), msg, "component", "memberlist")
	return len(p), nil
}

// lineKind is what a memberlist line says without its variable parts: its
// level and its text up to the first address, number, quote, bracket or
// colon, at most 64 bytes ("ERROR memberlist: Decrypt packet failed").
func lineKind(level slog.Level, msg string) string {
	rest, _ := strings.CutPrefix(msg, "memberlist: ")
	if i := strings.IndexAny(rest, ":0123456789'\"([{=%"); i >= 0 {
		rest = rest[:i]
	}
	kind := level.String() + " memberlist: " + strings.TrimSpace(rest)
	if len(kind) > 64 {
		kind = kind[:64]
	}
	return kind
}
