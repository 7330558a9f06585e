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
)

// WatchConfig configures a Watcher. The zero WatchConfig is valid.
type WatchConfig struct {
	// Interval is how often Run reads the file. If zero, 10 seconds.
	Interval time.Duration
	// Logger receives a record for every reload and every failed one. If
	// nil, nothing is logged.
	Logger *slog.Logger
}

// Watcher keeps the rules of a file current: it rereads the file every
// Interval and, when the content changed and parses, swaps the new Set in
// atomically. A file that fails to load or parse leaves the last good Set in
// force; the failure is logged and counted.
//
// Current is safe to call from any goroutine at any time and never blocks:
// a caller sees either the old Set or the new one, never a mix.
type Watcher struct {
	path     string
	interval time.Duration
	log      *slog.Logger

	cur     atomic.Pointer[Set]
	reloads atomic.Uint64
	errors  atomic.Uint64

	mu      sync.Mutex // serialises Reload
	last    []byte     // the content last examined, good or bad
	lastErr string     // the last read error, so a lasting one is reported once
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
	w := &Watcher{path: path, interval: c.Interval, log: c.Logger, last: data}
	w.cur.Store(s)
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

// Run calls Reload every Interval until ctx is done, then returns ctx.Err().
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			w.Reload() // reported through the logger and Errors
		}
	}
}

// Reload reads the file once. If its content changed and is valid, the new
// Set replaces the current one and changed is true. If it cannot be read or
// parsed, the current Set stays and err says why (a new failure is also
// logged and counted). Content already seen, valid or not, returns false and
// nil: a broken file is reported once, not every Interval. The whole file is
// read and compared each time (rule files are small), so an edit that keeps
// the size and the modification time is not missed.
func (w *Watcher) Reload() (changed bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	data, err := os.ReadFile(w.path)
	if err != nil {
		err = fmt.Errorf("rules: reload: %w", err)
		if msg := err.Error(); msg != w.lastErr {
			w.lastErr = msg
			w.failed(err)
		}
		return false, err
	}
	w.lastErr = ""
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
	return true, nil
}

func (w *Watcher) failed(err error) {
	w.errors.Add(1)
	w.log.Error("rules: reload failed; keeping the last good rules", "path", w.path, "err", err)
}
