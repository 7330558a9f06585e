package rules_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/rules"
)

// halfOf returns the longest proper prefix of full that parses into a Set
// other than full's: what a reader may catch while the file is written.
func halfOf(t *testing.T, full string) string {
	t.Helper()
	for n := len(full) - 1; n > 0; n-- {
		s, err := rules.Parse([]byte(full[:n]))
		if err == nil && (s.Lookup("/b") == nil || limitOf(s, "/a") != 500 || limitOf(s, "/b") != 500) {
			return full[:n]
		}
	}
	t.Fatal("no prefix of the file parses: the test would prove nothing")
	return ""
}

// A file written in place in two steps, 30 ms apart, is never loaded half
// written: Run waits until it has stayed the same for Settle. A reader
// polling Current every millisecond sees only the old Set, then the new one.
func TestHalfWrittenFileIsNeverLoaded(t *testing.T) {
	full := twoRules(500)
	half := halfOf(t, full)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, twoRules(1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := rules.Watch(ctx, path, rules.WatchConfig{Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var sawHalf atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			s := w.Current()
			whole := s.Lookup("/b") != nil && limitOf(s, "/a") == limitOf(s, "/b")
			if !whole || (limitOf(s, "/a") != 1 && limitOf(s, "/a") != 500) {
				sawHalf.Store(true)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(half); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // the writer pauses mid-file (the scenario, not a wait)
	if _, err := f.WriteString(full[len(half):]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return limitOf(w.Current(), "/a") == 500 })
	close(stop)
	wg.Wait()
	if sawHalf.Load() {
		t.Fatalf("a reader saw the half-written file (%d bytes of %d) loaded", len(half), len(full))
	}
	if w.Reloads() != 1 {
		t.Errorf("Reloads = %d, want 1 (the whole file only)", w.Reloads())
	}
}

// The path is a symbolic link into a directory that is swapped by renaming
// a new link over the old, as Kubernetes updates a ConfigMap volume
// (rules.yaml -> ..data/rules.yaml, ..data -> ..<timestamp>): the Watcher
// follows the swap.
func TestFollowsConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "rules.yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_12_01_01_00_00.1", twoRules(1))
	path := filepath.Join(dir, "rules.yaml")
	if err := os.Symlink(filepath.Join("..data", "rules.yaml"), path); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := rules.Watch(ctx, path, rules.WatchConfig{Interval: time.Millisecond, Settle: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	version("..2026_12_01_01_05_00.2", twoRules(2))
	if err := os.RemoveAll(filepath.Join(dir, "..2026_12_01_01_00_00.1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return limitOf(w.Current(), "/a") == 2 })
	if w.Errors() != 0 {
		t.Errorf("Errors = %d, want 0", w.Errors())
	}
}
