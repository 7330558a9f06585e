package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/ringlimitd/internal/config"
)

// watcher reloads the config when its files change: it reads them every
// interval, and a set of files that differs from the last one read is
// loaded; a bad set is logged (file and line) and counted, and the last
// good config stays in force.
type watcher struct {
	path  string
	merge bool
	log   *slog.Logger
	obs   *observer
	apply func(*config.Config)
	last  []config.File // the files last read
	good  atomic.Pointer[config.Config]
	err   atomic.Pointer[string] // the last load's error, "" when it loaded
}

// newWatcher loads path ("" for an empty config); an error at start is
// returned, as envoyproxy/ratelimit refuses to start on a bad config.
func newWatcher(path string, merge bool, log *slog.Logger, obs *observer) (*watcher, error) {
	w := &watcher{path: path, merge: merge, log: log, obs: obs}
	c := &config.Config{}
	if path != "" {
		files, err := readConfig(path)
		if err != nil {
			return nil, err
		}
		if c, err = config.Load(files, merge); err != nil {
			return nil, err
		}
		w.last = files
	}
	w.good.Store(c)
	obs.configLoaded(c, nil)
	empty := ""
	w.err.Store(&empty)
	return w, nil
}

func (w *watcher) current() *config.Config { return w.good.Load() }

// run checks the files every interval until ctx is done or stop closes.
func (w *watcher) run(ctx context.Context, every time.Duration, stop <-chan struct{}) {
	if w.path == "" {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
			w.check()
		}
	}
}

// check reads the files and loads them if they changed.
func (w *watcher) check() {
	files, err := readConfig(w.path)
	if err == nil && same(files, w.last) {
		return
	}
	var c *config.Config
	if err == nil {
		w.last = files
		c, err = config.Load(files, w.merge)
	}
	w.obs.configLoaded(c, err)
	if err != nil {
		msg := err.Error()
		if old := w.err.Swap(&msg); *old != msg {
			w.log.Error("config rejected; the last good config stays in force", "error", msg)
		}
		return
	}
	empty := ""
	w.err.Store(&empty)
	w.good.Store(c)
	if w.apply != nil {
		w.apply(c)
	}
	w.log.Info("config loaded", "path", w.path, "files", len(files), "domains", c.Domains())
}

func same(a, b []config.File) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Data, b[i].Data) {
			return false
		}
	}
	return true
}

// readConfig reads path: a file, or every regular file of a directory
// whose name does not start with "." (a Kubernetes ConfigMap's ..data and
// its links are skipped or followed as such), in name order.
func readConfig(path string) ([]config.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", config.ErrConfig, err)
	}
	if !st.IsDir() {
		b, err := readFile(path)
		if err != nil {
			return nil, err
		}
		return []config.File{{Name: path, Data: b}}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", config.ErrConfig, err)
	}
	var files []config.File
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(path, e.Name())
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			continue
		}
		b, err := readFile(p)
		if err != nil {
			return nil, err
		}
		files = append(files, config.File{Name: p, Data: b})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	return files, nil
}

func readFile(p string) ([]byte, error) {
	st, err := os.Stat(p)
	if err == nil && st.Size() > config.MaxFileSize {
		err = fmt.Errorf("%s: %d bytes, over %d", p, st.Size(), config.MaxFileSize)
	}
	var b []byte
	if err == nil {
		b, err = os.ReadFile(p)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", config.ErrConfig, err)
	}
	return b, nil
}
