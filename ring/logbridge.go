package ring

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
)

// memberlistLogger returns the *log.Logger memberlist writes to: one that
// forwards each line to l at the level memberlist tagged it with ("[DEBUG]",
// "[INFO]", "[WARN]", "[ERR]"), or that discards everything if l is nil.
func memberlistLogger(l *slog.Logger) *log.Logger {
	if l == nil {
		return log.New(io.Discard, "", 0)
	}
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

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
	w.l.Log(context.Background(), level, msg, "component", "memberlist")
	return len(p), nil
}
