package rules_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/rules"
)

// twoRules is a file whose two rules both have limit v, so a reader can tell
// a whole Set from a mixed one.
func twoRules(v int) string {
	return fmt.Sprintf("rules:\n  - endpoint: /a\n    limit: %d\n    window: 1s\n  - endpoint: /b\n    limit: %d\n    window: 1s\n", v, v)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write then rename, as a deploy should, so no reader sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newWatcher(t *testing.T, content string, c rules.WatchConfig) (*rules.Watcher, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, content)
	w, err := rules.NewWatcher(path, c)
	if err != nil {
		t.Fatal(err)
	}
	return w, path
}

func limitOf(s *rules.Set, name string) int64 { return s.Lookup(name).Rule.Limit }

func TestReloadPicksUpChange(t *testing.T) {
	w, path := newWatcher(t, twoRules(1), rules.WatchConfig{})
	first := w.Current()
	if changed, err := w.Reload(); changed || err != nil {
		t.Fatalf("unchanged file: Reload = %v, %v; want false, nil", changed, err)
	}
	if w.Current() != first {
		t.Fatal("an unchanged file replaced the Set")
	}
	writeFile(t, path, twoRules(2))
	if changed, err := w.Reload(); !changed || err != nil {
		t.Fatalf("changed file: Reload = %v, %v; want true, nil", changed, err)
	}
	if got := limitOf(w.Current(), "/a"); got != 2 {
		t.Errorf("limit after reload = %d, want 2", got)
	}
	if limitOf(first, "/a") != 1 {
		t.Error("the old Set changed: Sets must be immutable")
	}
	if w.Reloads() != 1 || w.Errors() != 0 {
		t.Errorf("Reloads, Errors = %d, %d; want 1, 0", w.Reloads(), w.Errors())
	}
}

func TestBrokenFileKeepsLastGoodRules(t *testing.T) {
	var logs syncBuffer
	w, path := newWatcher(t, twoRules(1), rules.WatchConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	good := w.Current()

	writeFile(t, path, strings.Replace(twoRules(3), "limit: 3\n    window: 1s\n  - endpoint: /b", "limit: 0\n    window: 1s\n  - endpoint: /b", 1))
	changed, err := w.Reload()
	var e *rules.Error
	if changed || !errors.As(err, &e) || e.Line != 3 || e.File != path {
		t.Fatalf("broken file: Reload = %v, %v; want false and an *Error at %s line 3", changed, err, path)
	}
	if w.Current() != good {
		t.Fatal("a broken file replaced the last good Set")
	}
	if w.Errors() != 1 || !strings.Contains(logs.String(), "reload failed") {
		t.Fatalf("Errors = %d, log %q; want 1 and a reload-failed record", w.Errors(), logs.String())
	}
	// The same broken content again is not a new failure.
	if changed, err := w.Reload(); changed || err != nil || w.Errors() != 1 {
		t.Fatalf("same broken file: Reload = %v, %v, Errors %d; want false, nil, 1", changed, err, w.Errors())
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Reload(); !errors.Is(err, os.ErrNotExist) || w.Current() != good || w.Errors() != 2 {
		t.Fatalf("missing file: err %v, Errors %d; want ErrNotExist, the good Set kept, 2", err, w.Errors())
	}
	if _, err := w.Reload(); w.Errors() != 2 {
		t.Fatalf("missing file again: err %v, Errors %d; want it counted once", err, w.Errors())
	}

	writeFile(t, path, twoRules(4))
	if changed, err := w.Reload(); !changed || err != nil || limitOf(w.Current(), "/b") != 4 {
		t.Fatalf("repaired file: Reload = %v, %v; want the new rules", changed, err)
	}
}

func TestNewWatcherNeedsAGoodFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if _, err := rules.NewWatcher(path, rules.WatchConfig{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: err = %v, want ErrNotExist", err)
	}
	writeFile(t, path, "rules:\n  - endpoint: /a\n")
	if _, err := rules.NewWatcher(path, rules.WatchConfig{}); !errors.Is(err, rules.ErrInvalid) {
		t.Errorf("invalid: err = %v, want ErrInvalid", err)
	}
}

func TestWatchReloadsUntilCancelled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, twoRules(1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := rules.Watch(ctx, path, rules.WatchConfig{Interval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, twoRules(7))
	waitFor(t, func() bool { return limitOf(w.Current(), "/a") == 7 })

	cancel() // goleak (TestMain) fails the package if Run outlives its context
	if err := w.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Run on a done context = %v, want context.Canceled", err)
	}
}

// Readers never see a mixed Set while a writer reloads over and over.
func TestConcurrentReadsDuringReloads(t *testing.T) {
	w, path := newWatcher(t, twoRules(1), rules.WatchConfig{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := w.Current()
				if a, b := limitOf(s, "/a"), limitOf(s, "/b"); a != b {
					errs <- fmt.Errorf("mixed Set: /a %d, /b %d", a, b)
					return
				}
			}
		}()
	}
	for v := 2; v <= 50; v++ {
		writeFile(t, path, twoRules(v))
		if _, err := w.Reload(); err != nil {
			t.Error(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if w.Reloads() != 49 || limitOf(w.Current(), "/a") != 50 {
		t.Errorf("Reloads = %d, limit %d; want 49, 50", w.Reloads(), limitOf(w.Current(), "/a"))
	}
}

// waitFor polls cond until it holds, failing the test after 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
