package rules

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/internal/logsum"
)

// DefaultSettle is WatchConfig.Settle when it is zero.
const DefaultSettle = 500 * time.Millisecond

// WatchConfig configures a Watcher. The zero WatchConfig is valid.
type WatchConfig struct {
	// Interval is how often Run reads the file. If zero, 10 seconds.
	Interval time.Duration
	// Settle is how long a changed file must stay unchanged before Run loads
	// it, so that a file caught while an editor or a copy is still writing
	// it (whose first half may well parse: a limit of 500 cut to 5, a rule
	// cut off) is never loaded. Run reads a changed file again after Settle
	// and loads it only if it is the same. If zero, DefaultSettle (500 ms);
	// if negative, a changed file loads at once.
	Settle time.Duration
	// Logger receives a record for every reload and every failed one
	// (repeated failures within 10 s are counted into one summary line),
	// and one at level Warn for each Warning of every Set loaded. If nil,
	// nothing is logged.
	Logger *slog.Logger
}

// Watcher keeps the rules of a file current: it rereads the file every
// Interval and, when the content changed, stayed the same for Settle and
// parses, swaps the new Set in atomically. A file that fails to load or parse
// leaves the last good Set in force; the failure is logged and counted.
//
// Replace the file atomically: write the new version to a temporary file in
// the same directory and rename it over the old one, so that every read
// sees one whole version (Settle only guards against writers that pause for
// less than it). The path is read through symbolic links on every read, so
// a swapped link is followed: a Kubernetes ConfigMap volume (the file links
// to ..data/name, and an update renames a new ..data link into place) is
// picked up like any other change.
//
// Current is safe to call from any goroutine at any time and never blocks:
// a caller sees either the old Set or the new one, never a mix.
type Watcher struct {
	path     string
	interval time.Duration
	settle   time.Duration
	log      *slog.Logger
	sum      *logsum.Summarizer

	cur     atomic.Pointer[Set]
	reloads atomic.Uint64
	errors  atomic.Uint64

	mu      sync.Mutex // serialises Reload
	last    []byte     // the content last examined, good or bad
	lastErr string     // the last read error, so a lasting one is reported once
	pending []byte     // Run: changed content waiting to stay unchanged for settle
	since   time.Time  // when pending was first read
}

// NewWatcher loads the file at path and returns a Watcher holding its rules.
// It fails if the first load does: there is no last good Set yet. It starts
// no goroutine; call Run, or use Watch.
func NewWatcher(path string, c WatchConfig) (*Watcher, error) {
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules: load: %w", err)
	}
	s, err := parse(path, data)
	if err != nil {
		return nil, err
	}
	if c.Settle == 0 {
		c.Settle = DefaultSettle
	}
	w := &Watcher{path: path, interval: c.Interval, settle: max(c.Settle, 0), log: c.Logger,
		sum: logsum.New(c.Logger, 0), last: data}
	w.cur.Store(s)
	w.warn(s)
	return w, nil
}

// Watch is NewWatcher followed by go Run(ctx): the reloading goroutine stops
// when ctx is done.
func Watch(ctx context.Context, path string, c WatchConfig) (*Watcher, error) {
	w, err := NewWatcher(path, c)
	if err != nil {
		return nil, err
	}
	go w.Run(ctx)
	return w, nil
}

// Current returns the Set in force.
func (w *Watcher) Current() *Set { return w.cur.Load() }

// Reloads counts the Sets swapped in after the first.
func (w *Watcher) Reloads() uint64 { return w.reloads.Load() }

// Errors counts failed reloads: each unreadable or invalid version of the file
// once, however many times it is read.
func (w *Watcher) Errors() uint64 { return w.errors.Load() }

// Run reads the file every Interval until ctx is done, then returns
// ctx.Err(). A changed file is read again Settle later and loaded as Reload
// would only if it is unchanged; otherwise its newest content waits another
// Settle.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	settled := time.NewTimer(time.Hour)
	settled.Stop()
	defer settled.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-settled.C:
		}
		if wait := w.poll(time.Now()); wait > 0 { // reported through the logger and Errors
			settled.Reset(wait)
		}
	}
}

// poll is one read of Run's: it loads the file if its content changed and
// has stayed the same for settle, and otherwise returns how long to wait
// before reading it again to see (0: nothing is waiting).
func (w *Watcher) poll(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := w.read()
	if err != nil || bytes.Equal(data, w.last) {
		w.pending = nil
		return 0
	}
	if w.settle > 0 {
		if w.pending == nil || !bytes.Equal(data, w.pending) {
			w.pending, w.since = data, now
			return w.settle
		}
		if waited := now.Sub(w.since); waited < w.settle {
			return w.settle - waited
		}
	}
	w.pending = nil
	w.load(data) // reported through the logger and Errors
	return 0
}

// Reload reads the file once. If its content changed and is valid, the new
// Set replaces the current one and changed is true. If it cannot be read or
// parsed, the current Set stays and err says why (a new failure is also
// logged and counted). Content already seen, valid or not, returns false and
// nil: a broken file is reported once, not every Interval. The whole file is
// read and compared each time (rule files are small), so an edit that keeps
// the size and the modification time is not missed.
//
// Reload loads what the file holds now, without waiting for Settle: call it
// when the file is known to be whole (after an atomic rename).
func (w *Watcher) Reload() (changed bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := w.read()
	if err != nil {
		return false, err
	}
	w.pending = nil
	return w.load(data)
}

// read reads the file; a new read error is logged and counted. Called with
// w.mu held.
func (w *Watcher) read() ([]byte, error) {
	data, err := os.ReadFile(w.path)
	if err != nil {
		err = fmt.Errorf("rules: reload: %w", err)
		if msg := err.Error(); msg != w.lastErr {
			w.lastErr = msg
			w.failed(err)
		}
		return nil, err
	}
	w.lastErr = ""
	return data, nil
}

// load swaps in the Set data holds if it differs from the content last
// examined. Called with w.mu held.
func (w *Watcher) load(data []byte) (changed bool, err error) {
	if bytes.Equal(data, w.last) {
		return false, nil
	}
	w.last = data
	s, err := parse(w.path, data)
	if err != nil {
		w.failed(err)
		return false, err
	}
	w.cur.Store(s)
	w.reloads.Add(1)
	w.log.Info("rules: reloaded", "path", w.path, "rules", s.Len())
	w.warn(s)
	return true, nil
}

// warn logs each of the loaded Set's warnings (see Warning).
func (w *Watcher) warn(s *Set) {
	for _, wn := range s.Warnings() {
		w.log.Warn(wn.String(), "path", w.path, "line", wn.Line, "rule", wn.Rule)
	}
}

func (w *Watcher) failed(err error) {
	w.errors.Add(1)
	w.sum.Log(slog.LevelError, "reload failed", "rules: reload failed; keeping the last good rules", "path", w.path, "err", err)
}
