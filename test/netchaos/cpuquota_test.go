package netchaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The CPU quota tests run a process tree (the demo cluster; a test binary
// running a cluster in process) in a CPU cgroup of its own with a CFS quota,
// as a Kubernetes CPU limit does: every process in it shares quota of every
// 100 ms period, and waits for the next period once it is spent. They need
// root and a cgroup file system that lets root make a cgroup with the cpu
// controller (v2's unified hierarchy, or v1's cpu hierarchy), and skip,
// saying why, otherwise, and with -short (they take a minute or more).

// quotaPeriod is the CFS period of every quota, the kernel's default.
const quotaPeriod = 100 * time.Millisecond

// cpuQuota is a CPU cgroup a test made, removed when the test ends.
type cpuQuota struct{ dir string }

const quotaPrefix = "ringlimit-quota-"

// newCPUQuota makes a cgroup whose processes share quota of CPU time in
// every 100 ms period (25 ms: a quarter of one CPU), or skips the test.
func newCPUQuota(t *testing.T, quota time.Duration) *cpuQuota {
	t.Helper()
	if testing.Short() {
		t.Skip("netchaos: skipped with -short: a CPU quota test runs for a minute or more")
	}
	if os.Geteuid() != 0 {
		t.Skip("netchaos: skipped: not root (a CPU quota needs a cgroup of its own)")
	}
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	var root string
	var files [][2]string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		root = "/sys/fs/cgroup"
		// Children get the cpu controller only if the parent hands it down.
		_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu"), 0o644)
		files = [][2]string{{"cpu.max", us(quota) + " " + us(quotaPeriod)}}
	} else {
		for _, d := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"} {
			if _, err := os.Stat(filepath.Join(d, "cpu.cfs_quota_us")); err == nil {
				root = d
				break
			}
		}
		if root == "" {
			t.Skip("netchaos: skipped: no cgroup v2 hierarchy and no v1 cpu hierarchy under /sys/fs/cgroup")
		}
		files = [][2]string{{"cpu.cfs_period_us", us(quotaPeriod)}, {"cpu.cfs_quota_us", us(quota)}}
	}
	sweepQuotas(root)
	q := &cpuQuota{dir: filepath.Join(root, fmt.Sprintf("%s%d-%d", quotaPrefix, os.Getpid(), rand.IntN(1e6)))}
	if err := os.Mkdir(q.dir, 0o755); err != nil {
		t.Skipf("netchaos: skipped: cannot make a cgroup: %v", err)
	}
	t.Cleanup(q.remove)
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(q.dir, f[0]), []byte(f[1]), 0o644); err != nil {
			t.Skipf("netchaos: skipped: cannot set the cgroup's quota: %v", err)
		}
	}
	return q
}

// remove removes the cgroup once its processes are gone (the kernel
// refuses before), polling for up to 10 s.
func (q *cpuQuota) remove() {
	deadline := time.Now().Add(10 * time.Second)
	for os.Remove(q.dir) != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// sweepQuotas removes the cgroups of earlier runs whose process is gone.
func sweepQuotas(root string) {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), quotaPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if p, err := strconv.Atoi(pid); err == nil && errors.Is(syscall.Kill(p, 0), syscall.ESRCH) {
			_ = os.Remove(filepath.Join(root, e.Name()))
		}
	}
}

// command returns a command that runs name with args inside the cgroup:
// a shell that moves itself into it and then execs name, so the process
// and everything it starts run under the quota from their first
// instruction. The command is killed when ctx is done or the test process
// dies.
func (q *cpuQuota) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	script := `echo $$ > "$1" && shift && exec "$@"`
	a := append([]string{"-c", script, "sh", filepath.Join(q.dir, "cgroup.procs"), name}, args...)
	cmd := exec.CommandContext(ctx, "/bin/sh", a...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	// Kill the whole group: the demo's node processes and store too.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// throttled describes the cgroup's CFS figures: periods, throttled
// periods and time throttled.
func (q *cpuQuota) throttled() string {
	b, err := os.ReadFile(filepath.Join(q.dir, "cpu.stat"))
	if err != nil {
		return err.Error()
	}
	f := map[string]int64{}
	for _, l := range lines(string(b)) {
		k, v, _ := strings.Cut(l, " ")
		f[k], _ = strconv.ParseInt(v, 10, 64)
	}
	if _, ok := f["nr_periods"]; !ok {
		return strings.TrimSpace(string(b))
	}
	throttled := time.Duration(f["throttled_time"]) // v1: ns
	if us, ok := f["throttled_usec"]; ok {          // v2
		throttled = time.Duration(us) * time.Microsecond
	}
	return fmt.Sprintf("throttled in %d of %d periods, %s in all", f["nr_throttled"], f["nr_periods"], throttled.Round(time.Millisecond))
}
