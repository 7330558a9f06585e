package netchaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// CPU throttling: slow is not dead. Every node container runs under a CFS
// quota of a quarter of one CPU (docker run --cpus 0.25, as a Kubernetes
// CPU limit of 250m), from its start to the end of the scenario, and one of
// them also runs a busy loop in its own CPU cgroup for three times the
// fault's hold, so
// that node gets the rest of a quota the loop spends first: its process
// runs a few milliseconds of every 100 and waits for the rest. Nothing has
// failed, so nothing may act as if it had: no breaker opens, no decision
// goes to the store or to the fail-open policy, no ring drops a member, no
// key admits more than its limit, and no caller sees an error.
//
// The nodes' timeout ceilings are 250 ms, not the suite's 50 ms: the owner
// beside the loop is descheduled up to 75 ms of every 100 ms period, and no
// timeout shorter than that tells it from an owner that hangs. With 50 ms
// ceilings, measured: every other node timed out 9 to 11 of its ~350
// forwards to it, while its lag read 75 ms (40 and 46 store decisions in
// two runs; in one a node's breaker opened too). A ceiling is only the most a call may wait: the
// effective timeout is still the 50 ms floor plus the caller's own lag, and
// grows to the ceiling only for a peer whose answers come late.

// throttled is every node container's quota and ceilings in the throttling
// scenario.
func throttled() limits {
	return limits{cpus: "0.25", forward: 250 * time.Millisecond, store: 250 * time.Millisecond}
}

func throttle(t *testing.T, im images, hold time.Duration) row {
	lim := throttled()
	ru := beginLimited(t, im, five(), chaosRule, lim)
	c, v := ru.c, pick(5)
	stop := c.hog(v)
	hold *= 3
	// No fault to detect: the first store or fail-open decision, if any.
	ru.r.Detect = ru.l.FirstSource(ru.from, hold, "store", "fallback")
	time.Sleep(time.Until(ru.from.Add(hold))) // the hog runs
	stop()
	ru.r.Recover = -1
	ru.recovered()
	victim := c.cnodes[v].Name()
	health := c.health()
	// Every bound is the limit: every owner stays up and answers.
	r := ru.finish([]int{v}, c.Others(), func(string) int { return chaosRule.Limit })
	for _, src := range []string{"store", "fallback"} {
		if n := ru.res.Sources[src]; n > 0 {
			t.Errorf("%d decisions by %s while every owner was up and answering", n, src)
		}
	}
	if len(ru.drops) > 0 {
		t.Errorf("rings dropped live members: %s", dropNote(ru.drops))
	}
	opens := c.breakerOpens()
	if len(opens) > 0 {
		t.Errorf("breakers opened while every peer and the store answered: %s", dropNote(opens))
	}
	r.Note = fmt.Sprintf("every node under --cpus %s, forward and store ceilings %s and %s; the victim is %s, beside a busy loop in its cgroup for %s; breakers opened: %s; at the end of the loop %s",
		lim.cpus, lim.forward, lim.store, victim, hold, dropNote(opens), health)
	if t.Failed() {
		for _, p := range c.cnodes {
			out, _ := docker("logs", p.ctr.Load().name)
			var keep []string
			for _, l := range lines(out) {
				if strings.Contains(l, "breaker") || strings.Contains(l, "member dropped") || strings.Contains(l, "level=WARN") {
					keep = append(keep, l)
				}
			}
			t.Logf("%s's breaker, drop and warning lines:\n%s", p.Name(), strings.Join(keep, "\n"))
		}
	}
	if len(ru.drops) == 0 {
		r.Note += "; rings dropped a node never"
	}
	return r
}

// health describes each node's measured lag (the lateness of its own
// timers), its forwards that got no answer, its store calls that timed out
// and its largest effective forward timeout, for the note.
func (c *cluster) health() string {
	var s []string
	for _, p := range c.cnodes {
		st, err := p.Stats()
		if err != nil {
			s = append(s, p.Name()+": "+err.Error())
			continue
		}
		var most time.Duration
		for _, d := range st.Node.PeerTimeouts {
			most = max(most, d)
		}
		s = append(s, fmt.Sprintf("%s lag %s, %d of %d forwards unanswered, forward timeout up to %s, %d store timeouts",
			p.Name(), st.Node.Lag.Round(time.Millisecond), st.Node.ForwardFailures, st.Node.Forwards, most.Round(time.Millisecond), st.Node.Store.Timeouts))
	}
	return strings.Join(s, "; ")
}

// hog starts a busy loop in node i's CPU cgroup, so that it spends the
// container's quota beside the node: a process of the host (the images
// carry no shell) moved into the cgroup of the container's first process.
// It returns a func that stops the loop (also run when the test ends).
func (c *cluster) hog(i int) func() {
	c.T.Helper()
	ctr := c.cnodes[i].ctr.Load()
	pid, err := ctr.pid()
	if err != nil {
		c.T.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		c.T.Fatal(err)
	}
	_, v2 := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	dir, err := cpuCgroupDir(string(b), v2 == nil)
	if err != nil {
		c.T.Fatalf("%s: %v", ctr.name, err)
	}
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.T.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	c.T.Cleanup(stop)
	procs := filepath.Join(dir, "cgroup.procs")
	if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		stop()
		c.T.Fatalf("moving the busy loop into %s: %v", procs, err)
	}
	return stop
}

// cpuCgroupDir returns the directory, under /sys/fs/cgroup, of the CPU
// cgroup named in a /proc/PID/cgroup file: the unified hierarchy's ("0::/…")
// under cgroup v2, else the v1 hierarchy whose controllers include cpu
// ("4:cpu,cpuacct:/docker/…" is under /sys/fs/cgroup/cpu,cpuacct).
func cpuCgroupDir(procCgroup string, v2 bool) (string, error) {
	for _, l := range lines(procCgroup) {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		if v2 {
			if f[0] == "0" && f[1] == "" {
				return filepath.Join("/sys/fs/cgroup", f[2]), nil
			}
			continue
		}
		for _, ctl := range strings.Split(f[1], ",") {
			if ctl == "cpu" {
				return filepath.Join("/sys/fs/cgroup", f[1], f[2]), nil
			}
		}
	}
	return "", fmt.Errorf("netchaos: no CPU cgroup in %q", procCgroup)
}

// breakerOpens counts, for each node, the times one of its breakers (a
// peer's or the store's) opened, from its log.
func (c *cluster) breakerOpens() map[string]int {
	n := map[string]int{}
	for _, p := range c.cnodes {
		out, err := docker("logs", p.ctr.Load().name)
		if err != nil {
			c.T.Errorf("logs of %s: %v", p.Name(), err)
			continue
		}
		if k := countOpens(out); k > 0 {
			n[p.Name()] = k
		}
	}
	return n
}

// countOpens counts, in a node's log, the breaker state changes to open
// (logged as a warning each: failover.Breaker).
func countOpens(log string) int {
	n := 0
	for _, l := range lines(log) {
		if strings.Contains(l, `msg="failover: breaker state changed"`) && strings.Contains(l, " to=open") {
			n++
		}
	}
	return n
}
