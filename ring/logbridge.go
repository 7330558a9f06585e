package ring

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
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

var levelTags = []struct {
	tag   []byte
	level slog.Level
}{
	{[]byte("[DEBUG] "), slog.LevelDebug},
	{[]byte("[INFO] "), slog.LevelInfo},
	{[]byte("[WARN] "), slog.LevelWarn},
	{[]byte("[ERR] "), slog.LevelError},
	{[]byte("[ERROR] "), slog.LevelError},
}

func (w slogWriter) Write(p []byte) (int, error) {
	msg := bytes.TrimRight(p, "\n")
	level := slog.LevelInfo
	for _, t := range levelTags {
		if bytes.HasPrefix(msg, t.tag) {
			level, msg = t.level, msg[len(t.tag):]
			break
		}
	}
	w.l.Log(context.Background(), level, string(msg), "component", "memberlist")
	return len(p), nil
}
