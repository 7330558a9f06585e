package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
)

// The forwarding study: CPU per forwarded decision of the calling node, with
// every node of the cluster in its own OS process, at several cluster sizes.
//
// The test binary runs itself again as the nodes (TestHelperNode, chosen by
// an environment variable). Each node process prints one line when it
// serves, then obeys commands on its stdin, one a line, answering one line
// on stdout each:
//
//	wait N        → "ok" once it sees N members and no hand-off under way
//	run D G PROF  → (the caller) D forwarded decisions from G goroutines,
//	                answered "cpu-ns wall-ns decisions failures not-peer
//	                voluntary-switches read-syscalls write-syscalls";
//	                PROF, if not "-", is a file for a CPU profile of them
//
// A node process exits when its stdin closes (the test ended, or died), when
// its parent dies (Pdeathsig) and in any case after helperLife.

const (
	helperEnv   = "RINGLIMIT_BENCH_NODE" // the node's name: this process is a node
	joinEnv     = "RINGLIMIT_BENCH_JOIN" // gossip addresses to join, comma separated
	helperLife  = 30 * time.Minute
	readyPrefix = "ringlimit-node-ready "
)

var forwardSecret = []byte("bench-forward-secret-0123456789a")

var forwardRule = ringlimit.Rule{Limit: 1 << 40, Window: time.Second}

// TestHelperNode is a node process of the forwarding study; it does nothing
// in a normal run.
func TestHelperNode(t *testing.T) {
	name := os.Getenv(helperEnv)
	if name == "" {
		t.Skip("a node process of TestForwardCost")
	}
	time.AfterFunc(helperLife, func() { os.Exit(3) })
	var join []string
	if j := os.Getenv(joinEnv); j != "" {
		join = strings.Split(j, ",")
	}
	n, err := node.New(node.Config{
		Name:           name,
		GossipAddr:     "127.0.0.1:0",
		RPCAddr:        "127.0.0.1:0",
		Join:           join,
		SecretKey:      forwardSecret,
		Gossip:         node.GossipLAN, // as deployed: GossipFast probes so often that 16 idle nodes take most of a core
		ForwardTimeout: time.Second,
		HandoffWindow:  50 * time.Millisecond,
		LeaseHot:       -1, // forwarding is measured: a hot token bucket would lease now
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	reply := func(format string, a ...any) {
		fmt.Fprintf(out, format+"\n", a...)
		out.Flush()
	}
	reply("%s%s", readyPrefix, n.GossipAddr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 2 && f[0] == "wait":
			want, _ := strconv.Atoi(f[1])
			if err := settle(n, want); err != nil {
				reply("err %v", err)
			} else {
				reply("ok")
			}
		case len(f) == 4 && f[0] == "run":
			d, _ := strconv.Atoi(f[1])
			g, _ := strconv.Atoi(f[2])
			r, err := forward(n, d, g, f[3])
			if err != nil {
				reply("err %v", err)
			} else {
				reply("%d %d %d %d %d %d %d %d", r.cpu, r.wall, r.decisions, r.failures, r.notPeer, r.vcsw, r.reads, r.writes)
			}
		default:
			reply("err unknown command %q", in.Text())
		}
	}
	os.Exit(0) // stdin closed: the study is over; the cluster goes as a whole
}

// settle waits until n sees want members and no hand-off is under way.
func settle(n *node.Node, want int) error {
	deadline := time.Now().Add(30 * time.Second)
	for len(n.Members()) != want || n.Stats().Changing {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s sees %d members (changing %v), want %d", n.Name(), len(n.Members()), n.Stats().Changing, want)
		}
		time.Sleep(10 * time.Millisecond) // polling membership, with a deadline
	}
	return nil
}

type forwardResult struct {
	cpu, wall                          int64 // ns
	decisions, failures, notPeer, vcsw int64
	reads, writes                      int64 // system calls
}

// syscalls returns this process's read and write system calls so far
// (/proc/self/io; zeros where there is none).
func syscalls() (reads, writes int64) {
	b, _ := os.ReadFile("/proc/self/io")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscr: "); ok {
			reads, _ = strconv.ParseInt(v, 10, 64)
		} else if v, ok := strings.CutPrefix(l, "syscw: "); ok {
			writes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return reads, writes
}

func rusage() syscall.Rusage {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}

// forward makes d decisions from callers goroutines on keys that peers own
// (a spread of 4096 keys over them), after a warm-up, and measures this
// process's CPU time over them.
func forward(n *node.Node, d, callers int, prof string) (forwardResult, error) {
	var keys []string
	for i := 0; len(keys) < 4096; i++ {
		if k := "k" + strconv.Itoa(i); n.Owner(k) != n.Name() {
			keys = append(keys, k)
		}
	}
	var failures, notPeer atomic.Int64
	run := func(total int) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g * 127; next.Add(1) <= int64(total); i++ {
					dec, err := n.Allow(context.Background(), keys[i%len(keys)], forwardRule)
					if err != nil {
						failures.Add(1)
					} else if dec.Source != ringlimit.Peer {
						notPeer.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	run(d / 10) // warm-up: connections dialled, buffers and workers grown
	failures.Store(0)
	notPeer.Store(0)
	if prof != "-" {
		f, err := os.Create(prof)
		if err != nil {
			return forwardResult{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return forwardResult{}, err
		}
		defer pprof.StopCPUProfile()
	}
	r0, w0 := syscalls()
	ru0, t0 := rusage(), time.Now()
	run(d)
	wall, ru1 := time.Since(t0), rusage()
	r1, w1 := syscalls()
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	return forwardResult{cpu: cpu, wall: wall.Nanoseconds(), decisions: int64(d),
		failures: failures.Load(), notPeer: notPeer.Load(), vcsw: ru1.Nvcsw - ru0.Nvcsw,
		reads: r1 - r0, writes: w1 - w0}, nil
}

// nodeProc is one node process, seen from the test.
type nodeProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	gossip string
}

// ask sends one command and returns its answer.
func (p *nodeProc) ask(timeout time.Duration, format string, a ...any) (string, error) {
	if _, err := fmt.Fprintf(p.stdin, format+"\n", a...); err != nil {
		return "", err
	}
	got := make(chan string, 1)
	go func() {
		if p.out.Scan() {
			got <- p.out.Text()
		}
		close(got)
	}()
	select {
	case line, ok := <-got:
		if !ok {
			return "", errors.New("node process exited")
		}
		if strings.HasPrefix(line, "err ") {
			return "", errors.New(line[4:])
		}
		return line, nil
	case <-time.After(timeout):
		p.cmd.Process.Kill() // the reader above ends with the pipe
		return "", fmt.Errorf("no answer to %q within %s", fmt.Sprintf(format, a...), timeout)
	}
}

// startNode starts a node process named name that joins join, from the
// test binary bin, and stops it when the test ends.
func startNode(t testing.TB, bin, name string, join []string) *nodeProc {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestHelperNode$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+name, joinEnv+"="+strings.Join(join, ","))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &nodeProc{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		stdin.Close() // the node exits at once
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	ready := make(chan string, 1)
	go func() {
		for p.out.Scan() {
			if line := p.out.Text(); strings.HasPrefix(line, readyPrefix) {
				ready <- strings.TrimPrefix(line, readyPrefix)
				return
			}
		}
		close(ready)
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			t.Fatalf("node process %s exited before it served", name)
		}
		p.gossip = addr
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("node process %s did not serve within 20 s", name)
	}
	return p
}

// procCluster is n node processes; the first is the caller.
type procCluster struct {
	bin   string
	n     int
	nodes []*nodeProc
}

// startCluster starts n node processes of the test binary bin, named
// c<n>-1…, each joining those before it, and waits until each sees all n
// and is past the hand-offs.
func startCluster(t testing.TB, bin string, n int) *procCluster {
	t.Helper()
	c := &procCluster{bin: bin, n: n}
	var join []string
	for i := range n {
		p := startNode(t, bin, fmt.Sprintf("c%d-%d", n, i+1), join)
		c.nodes = append(c.nodes, p)
		join = append(join, p.gossip)
	}
	for _, p := range c.nodes {
		if _, err := p.ask(40*time.Second, "wait %d", n); err != nil {
			t.Fatalf("%d nodes: %v", n, err)
		}
	}
	return c
}

// measure runs d forwarded decisions from g goroutines on the caller.
func (c *procCluster) measure(t testing.TB, d, g int, prof string) forwardResult {
	t.Helper()
	line, err := c.nodes[0].ask(5*time.Minute, "run %d %d %s", d, g, prof)
	if err != nil {
		t.Fatalf("%s, %d nodes: %v", c.bin, c.n, err)
	}
	var r forwardResult
	if _, err := fmt.Sscan(line, &r.cpu, &r.wall, &r.decisions, &r.failures, &r.notPeer, &r.vcsw, &r.reads, &r.writes); err != nil {
		t.Fatalf("%d nodes: answer %q: %v", c.n, line, err)
	}
	if r.failures > 0 || r.notPeer > 0 {
		t.Errorf("%d nodes: %d of %d decisions failed, %d not decided by a peer", c.n, r.failures, r.decisions, r.notPeer)
	}
	return r
}

// Two node processes: every decision of the caller is forwarded to the
// other, and the processes stop with the test (a quick check of the study's
// machinery).
func TestForwardProcesses(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in a node process")
	}
	c := startCluster(t, os.Args[0], 2)
	r := c.measure(t, 2000, 32, "-")
	if r.cpu <= 0 || r.wall <= 0 {
		t.Errorf("measured %+v", r)
	}
}

// TestForwardCost is issue 20's item 4: CPU per forwarded decision of the
// calling node, every node in its own process, 32 callers, at 2, 4, 8 and 16
// nodes; the clusters all run at once and the sizes are measured in turn in
// each repetition. It fails if 16 nodes cost more than 1.3× 2 nodes.
//
// RINGLIMIT_PER_PEER=k makes the callers k per peer (k × (nodes − 1))
// instead of 32 at every size: each connection then has as many calls to
// batch at every size.
//
// RINGLIMIT_VS names another build of this test binary (go test -c of
// another commit): its clusters run beside these and every size of both is
// measured in each repetition, for a before-and-after side by side.
func TestForwardCost(t *testing.T) {
	if os.Getenv("RINGLIMIT_FORWARD") == "" {
		t.Skip("set RINGLIMIT_FORWARD=1 to run the forwarding study (about 2 minutes)")
	}
	sizes := []int{2, 4, 8, 16}
	if s := os.Getenv("RINGLIMIT_NODES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			var n int
			fmt.Sscan(f, &n)
			sizes = append(sizes, n)
		}
	}
	reps, decisions := 5, 100_000
	if s := os.Getenv("RINGLIMIT_REPS"); s != "" {
		fmt.Sscan(s, &reps)
	}
	if s := os.Getenv("RINGLIMIT_DECISIONS"); s != "" {
		fmt.Sscan(s, &decisions)
	}
	perPeer := 0
	if s := os.Getenv("RINGLIMIT_PER_PEER"); s != "" {
		fmt.Sscan(s, &perPeer)
	}
	callers := func(n int) int {
		if perPeer > 0 {
			return perPeer * (n - 1)
		}
		return 32
	}
	builds := []string{os.Args[0]}
	names := []string{"this build"}
	if vs := os.Getenv("RINGLIMIT_VS"); vs != "" {
		builds = append([]string{vs}, builds...)
		names = append([]string{vs}, names...)
	}
	type series struct{ cpu, wall, vcsw, reads, writes []float64 }
	clusters := make([][]*procCluster, len(builds))
	got := make([][]series, len(builds))
	for b, bin := range builds {
		for _, n := range sizes {
			clusters[b] = append(clusters[b], startCluster(t, bin, n))
		}
		got[b] = make([]series, len(sizes))
	}
	for range reps { // interleaved: every size of every build once per repetition
		for i := range sizes {
			for b := range builds {
				r := clusters[b][i].measure(t, decisions, callers(sizes[i]), "-")
				d, s := float64(r.decisions), &got[b][i]
				s.cpu = append(s.cpu, float64(r.cpu)/d/1e3)
				s.wall = append(s.wall, float64(r.wall)/d/1e3)
				s.vcsw = append(s.vcsw, float64(r.vcsw)/d)
				s.reads = append(s.reads, float64(r.reads)/d)
				s.writes = append(s.writes, float64(r.writes)/d)
			}
		}
	}
	var report strings.Builder
	for b := range builds {
		fmt.Fprintf(&report, "%s:\n| nodes | CPU µs/decision | ÷ %d nodes | wall µs/decision | switches/decision | reads/decision | writes/decision |\n|---|---|---|---|---|---|---|\n", names[b], sizes[0])
		base := median(got[b][0].cpu)
		for i, n := range sizes {
			s := &got[b][i]
			c := median(s.cpu)
			fmt.Fprintf(&report, "| %d | %.2f | %.2f× | %.2f | %.3f | %.3f | %.3f |\n", n, c, c/base, median(s.wall), median(s.vcsw), median(s.reads), median(s.writes))
			t.Logf("%s, %d nodes: cpu µs %.2f  wall µs %.2f", names[b], n, s.cpu, s.wall)
			if b == len(builds)-1 && perPeer == 0 && n == 16 && sizes[0] == 2 && c > 1.3*base {
				t.Errorf("16 nodes: %.2f µs of CPU per forwarded decision, %.2f× 2 nodes' %.2f (want ≤ 1.3×)", c, c/base, base)
			}
		}
	}
	if dir := os.Getenv("RINGLIMIT_PROFILE"); dir != "" {
		for i, c := range clusters[len(builds)-1] { // after the measurements: a profile costs CPU
			c.measure(t, decisions, callers(sizes[i]), fmt.Sprintf("%s/forward-%d.pprof", dir, sizes[i]))
		}
	}
	who := "32 callers"
	if perPeer > 0 {
		who = fmt.Sprintf("%d callers per peer", perPeer)
	}
	t.Logf("\n%s(%s on the first node, %d decisions, median of %d interleaved repetitions)", report.String(), who, decisions, reps)
}
