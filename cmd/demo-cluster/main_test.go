package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(removingDemo{m})
}

// removingDemo removes the built demo binary after the tests ran.
type removingDemo struct{ m *testing.M }

func (r removingDemo) Run() int {
	code := r.m.Run()
	if demo.dir != "" {
		os.RemoveAll(demo.dir)
	}
	return code
}

var demo struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

// demoBinary builds the command once per test run, without -race (the node
// processes need not be slow), and returns its path.
func demoBinary(t *testing.T) string {
	t.Helper()
	demo.once.Do(func() {
		demo.dir, demo.err = os.MkdirTemp("", "demo-cluster-test-")
		if demo.err != nil {
			return
		}
		demo.bin = filepath.Join(demo.dir, "demo-cluster")
		cmd := exec.Command("go", "build", "-o", demo.bin, ".")
		demo.out, demo.err = cmd.CombinedOutput()
	})
	if demo.err != nil {
		t.Fatalf("go build: %v\n%s", demo.err, demo.out)
	}
	return demo.bin
}

// leftovers returns the processes whose command line mentions path.
func leftovers(path string) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), path) {
			continue
		}
		found = append(found, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return found
}
