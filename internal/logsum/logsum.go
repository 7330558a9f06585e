// Package logsum keeps repeated warnings from flooding a log: the first line
// of a kind in an interval is written at once, the rest are counted, and the
// count is written as one summary line when the interval is over.
//
// A Summarizer starts no goroutine. A summary is written by the first line
// of its kind after the interval, or by Flush; owners call Flush from a loop
// they already run and when they close, so no count is lost.
package logsum

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// MaxKinds bounds the kinds a Summarizer tracks; lines of kinds beyond it
// share one entry, named "other".
const MaxKinds = 64

// DefaultInterval is the interval of a Summarizer made with a zero interval.
const DefaultInterval = 10 * time.Second

// Summarizer rate-limits log lines by kind. The zero value is not usable: use
// New. A Summarizer is safe for simultaneous use by multiple goroutines.
type Summarizer struct {
	l     *slog.Logger
	every time.Duration
	now   func() time.Time // time.Now; tests replace it

	mu      sync.Mutex
	kinds   map[string]*entry
	counted int64 // lines given to Log
}

type entry struct {
	level      slog.Level
	msg        string
	until      time.Time // end of the interval that began with the line written
	suppressed int64
	args       []any // the last suppressed line's attributes
}

// New returns a Summarizer that writes to l (nil discards everything) at
// most one line and one summary per kind per interval. If every is zero,
// DefaultInterval.
func New(l *slog.Logger, every time.Duration) *Summarizer {
	if every <= 0 {
		every = DefaultInterval
	}
	return &Summarizer{l: l, every: every, now: time.Now, kinds: map[string]*entry{}}
}

// Warn is shorthand for Log(slog.LevelWarn, kind, msg, args...).
func (s *Summarizer) Warn(kind, msg string, args ...any) { s.Log(slog.LevelWarn, kind, msg, args...) }

// Log writes msg with args at level if it is the first line of kind in the
// current interval; otherwise it counts it. kind names what happened ("peer
// refused: cap"), from a small fixed set: never a remote address or a key.
func (s *Summarizer) Log(level slog.Level, kind, msg string, args ...any) {
	if s == nil || s.l == nil {
		return
	}
	now := s.now()
	s.mu.Lock()
	s.counted++
	e := s.kinds[kind]
	if e == nil {
		if len(s.kinds) >= MaxKinds {
			kind = "other"
			e = s.kinds[kind]
		}
		if e == nil {
			e = &entry{}
			s.kinds[kind] = e
		}
	}
	if now.Before(e.until) {
		e.suppressed++
		e.args = args
		s.mu.Unlock()
		return
	}
	sum := e.summary(s.every)
	e.level, e.msg, e.until, e.suppressed, e.args = level, msg, now.Add(s.every), 0, nil
	s.mu.Unlock()
	if sum != nil {
		sum(s.l)
	}
	s.l.Log(context.Background(), level, msg, args...)
}

// Flush writes the summary of every kind whose interval is over and that
// has suppressed lines; with all set, of every kind that has any.
func (s *Summarizer) Flush(all bool) {
	if s == nil || s.l == nil {
		return
	}
	now := s.now()
	var out []func(*slog.Logger)
	s.mu.Lock()
	for _, e := range s.kinds {
		if all || !now.Before(e.until) {
			if sum := e.summary(s.every); sum != nil {
				out = append(out, sum)
				e.suppressed, e.args = 0, nil
			}
		}
	}
	s.mu.Unlock()
	for _, f := range out {
		f(s.l)
	}
}

// Suppressed returns how many lines of kind are counted and not yet
// summarised.
func (s *Summarizer) Suppressed(kind string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.kinds[kind]; e != nil {
		return e.suppressed
	}
	return 0
}

// Counted returns how many lines were given to Log (and Warn), written or
// counted, since New.
func (s *Summarizer) Counted() int64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counted
}

// summary returns the function that writes e's summary, or nil if it has
// none. Called with s.mu held; the function runs without it.
func (e *entry) summary(every time.Duration) func(*slog.Logger) {
	if e.suppressed == 0 {
		return nil
	}
	level, msg, n, args := e.level, e.msg, e.suppressed, e.args
	return func(l *slog.Logger) {
		l.Log(context.Background(), level, msg+" (repeated)",
			append([]any{"suppressed", n, "interval", every.String(), "last"}, slog.GroupValue(attrs(args)...))...)
	}
}

// attrs turns slog's alternating key/value arguments into attributes.
func attrs(args []any) []slog.Attr {
	var out []slog.Attr
	r := slog.NewRecord(time.Time{}, 0, "", 0)
	r.Add(args...)
	r.Attrs(func(a slog.Attr) bool { out = append(out, a); return true })
	return out
}
