package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runDemo runs the built command with args and env (nil: this process's)
// and returns its output and the summary from its last line.
func runDemo(t *testing.T, bin string, env []string, timeout time.Duration, args ...string) (string, summary) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := out.String()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, text)
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	var s struct{ Summary *summary }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil || s.Summary == nil {
		t.Fatalf("no summary on the last line (%v):\n%s", err, text)
	}
	// Every process it started is gone by the time it exits; give the
	// kernel a moment to reap what Pdeathsig killed.
	deadline := time.Now().Add(3 * time.Second)
	for left := leftovers(bin); len(left) > 0; left = leftovers(bin) {
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return text, *s.Summary
}

func TestChaosRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster for 20 s")
	}
	bin := demoBinary(t)
	out, s := runDemo(t, bin, nil, 60*time.Second, "-chaos", "-duration", "20s", "-plain")
	t.Logf("\n%s", out)

	if s.Errors != 0 {
		t.Errorf("%d errors seen by the traffic generator", s.Errors)
	}
	if s.NodesUp != s.Nodes || s.Nodes != 3 {
		t.Errorf("%d of %d nodes up at the end, want 3 of 3", s.NodesUp, s.Nodes)
	}
	want := []string{"whole", "node 2 killed", "node 2 back", "store killed", "store back"}
	if len(s.Phases) != len(want) {
		t.Fatalf("phases %+v, want %q", s.Phases, want)
	}
	var all [4]uint64
	for i, p := range s.Phases {
		if p.Name != want[i] {
			t.Errorf("phase %d is %q, want %q", i, p.Name, want[i])
		}
		if p.Requests < 300 {
			t.Errorf("phase %q: only %d requests", p.Name, p.Requests)
		}
		if p.Errors != 0 {
			t.Errorf("phase %q: %d errors (last: %s)", p.Name, p.Errors, p.LastErr)
		}
		if p.Denied == 0 {
			t.Errorf("phase %q: nothing denied: the hot keys should be over their limits", p.Name)
		}
		for src, name := range []string{"local", "peer", "store", "fallback"} {
			all[src] += p.Sources[name]
		}
		if !p.Whole {
			continue
		}
		if p.Check.Windows == 0 {
			t.Errorf("phase %q: no whole window was checked", p.Name)
		}
		if p.Check.OverLimit != 0 || p.Check.MaxAdmitted > p.Check.Limit {
			t.Errorf("phase %q, cluster whole: %d windows over the limit, up to %d admitted of %d",
				p.Name, p.Check.OverLimit, p.Check.MaxAdmitted, p.Check.Limit)
		}
		if p.Check.MaxAdmitted < p.Check.Limit {
			t.Errorf("phase %q: no key reached its limit (max %d of %d): the check proves nothing",
				p.Name, p.Check.MaxAdmitted, p.Check.Limit)
		}
	}
	if all[0] == 0 || all[1] == 0 {
		t.Errorf("sources over the run %v: want local and peer decisions", all)
	}
	// The dead node's keys go to the store until the survivors drop it, at
	// their first refused forward (ring.Membership.Refused), often before
	// any call reaches the store: by the store or by a survivor, never by
	// the policy.
	if killed := s.Phases[1]; killed.Sources["fallback"] != 0 || killed.Sources["store"]+killed.Sources["local"] == 0 {
		t.Errorf("phase %q: sources %v: want the dead node's keys decided by the store or a survivor, none by the policy", killed.Name, killed.Sources)
	}
}

// With no server binary on PATH, the demo runs its embedded store, and the
// nodes' decisions go to it while an owner is dead.
func TestEmbeddedStoreRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster for 8 s")
	}
	bin := demoBinary(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(goBin) // a PATH with Go's own bin only: no store server
	env := []string{"PATH=" + dir, "HOME=" + os.Getenv("HOME")}
	for _, name := range []string{"valkey-server", "redis-server"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Fatalf("%s is in %s: cannot hide it", name, dir)
		}
	}
	out, s := runDemo(t, bin, env, 40*time.Second, "-chaos", "-duration", "8s", "-plain", "-nodes", "2")
	t.Logf("\n%s", out)
	if !strings.Contains(s.Store, "embedded") || !strings.Contains(out, "store: embedded") {
		t.Errorf("store %q, want the embedded one", s.Store)
	}
	if s.Errors != 0 || s.NodesUp != 2 {
		t.Errorf("%d errors, %d of 2 nodes up", s.Errors, s.NodesUp)
	}
	if s.Requests < 1000 {
		t.Errorf("only %d requests in 8 s", s.Requests)
	}
	// While node 2 is dead its keys go to the store until node 1's ring
	// drops it, or, once dropped, to node 1 itself. Node 1 drops it at its
	// first refused forward (ring.Membership.Refused), usually before any
	// call reaches the store; whichever it was, node 1 decided them all.
	if len(s.Phases) < 2 {
		t.Fatalf("phases %+v: want the kill's", s.Phases)
	}
	if p := s.Phases[1]; p.Sources["store"]+p.Sources["local"] == 0 || p.Sources["peer"] != 0 || p.Sources["fallback"] != 0 {
		t.Errorf("phase %+v: want node 2's keys decided by the store or by node 1, none by a peer or the policy", p)
	}
}

// Killing the supervisor with SIGKILL, which it cannot catch, takes its node
// processes and its store with it (Pdeathsig): a server from PATH, or the
// embedded store, which runs as a child too.
func TestParentKilled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux only")
	}
	bin := demoBinary(t)
	for _, store := range []string{"auto", "embedded"} {
		t.Run(store, func(t *testing.T) {
			cmd := exec.Command(bin, "-plain", "-rate", "50", "-store", store)
			cmd.Dir = t.TempDir()
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var seen strings.Builder
			sc := bufio.NewScanner(out)
			for sc.Scan() && !strings.HasSuffix(sc.Text(), "nodes up") {
				seen.WriteString(sc.Text() + "\n")
			}
			children := childrenOf(cmd.Process.Pid)
			if len(children) != 4 { // 3 nodes and the store server
				t.Errorf("children before the kill: %v, want 3 nodes and the store server\n%s", children, seen.String())
			}
			if store == "embedded" && !slices.ContainsFunc(children, isEmbeddedStore) {
				t.Errorf("children before the kill: %v, none of them the embedded store\n%s", children, seen.String())
			}
			cmd.Process.Kill()
			cmd.Wait()
			deadline := time.Now().Add(3 * time.Second)
			for {
				var left []int
				for _, pid := range children {
					if alive(pid) {
						left = append(left, pid)
					}
				}
				if len(left) == 0 {
					return
				}
				if time.Now().After(deadline) {
					for _, pid := range left { // do not leave them to the next test
						syscall.Kill(pid, syscall.SIGKILL)
					}
					t.Fatalf("left behind after SIGKILL of the supervisor: %v", left)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// isEmbeddedStore reports whether pid is this binary's hidden store subcommand.
func isEmbeddedStore(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(string(b), "\x00")
	return err == nil && len(args) > 1 && args[1] == "store"
}

// childrenOf returns the pids of the processes whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			if child, err := strconv.Atoi(e.Name()); err == nil {
				out = append(out, child)
			}
		}
	}
	return out
}

// alive reports whether pid is a process that has not exited (a zombie
// waiting to be reaped has).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
