package chaos

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// Timeouts given to every node, and the margin a caller may wait beyond
// them (see maxCallLatency).
const (
	forwardTimeout = 50 * time.Millisecond
	storeTimeout   = 50 * time.Millisecond
)

// buildNode builds ./chaosnode (without -race, to keep it quick) into dir.
func buildNode(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "chaosnode")
	cmd := exec.Command("go", "build", "-o", bin, "./chaosnode")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./chaosnode: %v\n%s", err, out)
	}
	return bin
}

// proc is one node process: the node as the harness reaches it, and the
// process it runs as. Its ports are chosen once, so a restarted node keeps
// them.
type proc struct {
	*chaoskit.Node
	gossip, rpc, httpAdr string
	logPath              string

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed when cmd has exited
	state *os.ProcessState
	incs  int // processes started under this name
}

// cluster is a store server and node processes on loopback. procs[i] is
// Nodes[i]'s process.
type cluster struct {
	chaoskit.Cluster
	bin    string
	secret string
	store  *valkeytest.Server
	procs  []*proc
}

// startCluster starts a store and n nodes, and waits until every node sees
// every other.
func startCluster(t *testing.T, bin string, n int) *cluster {
	t.Helper()
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	c := &cluster{Cluster: chaoskit.Cluster{T: t}, bin: bin, secret: hex.EncodeToString(key), store: valkeytest.Start(t)}
	dir := t.TempDir()
	if *logsDir != "" {
		dir = filepath.Join(*logsDir, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		p := &proc{
			Node:    chaoskit.NewNode(fmt.Sprintf("n%d", i+1), 32),
			gossip:  freeAddr(t, true),
			rpc:     freeAddr(t, false),
			httpAdr: freeAddr(t, false),
			logPath: filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)),
		}
		p.SetAddr(p.httpAdr)
		c.procs = append(c.procs, p)
		c.Nodes = append(c.Nodes, p.Node)
	}
	t.Cleanup(c.stopAll)
	for i := range c.procs {
		c.start(i)
	}
	c.WaitConverged(c.Names(), 15*time.Second)
	for _, p := range c.procs {
		p.On()
	}
	return c
}

// start starts node i's process and waits until it answers /healthz. It
// does not mark it up.
func (c *cluster) start(i int) {
	c.T.Helper()
	p := c.procs[i]
	var join []string
	for _, o := range c.procs {
		if o != p {
			join = append(join, o.gossip)
		}
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.T.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(c.bin,
		"-name", p.Name(), "-gossip", p.gossip, "-rpc", p.rpc, "-http", p.httpAdr,
		"-join", strings.Join(join, ","), "-valkey", c.store.Addr(),
		"-forward-timeout", forwardTimeout.String(), "-store-timeout", storeTimeout.String(), "-v")
	if *logsDir != "" {
		cmd.Args = append(cmd.Args, "-trace")
	}
	cmd.Env = append(os.Environ(), "CHAOSNODE_SECRET="+c.secret)
	cmd.Stdout, cmd.Stderr = log, log
	// Die with the test binary, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.T.Fatalf("start %s: %v", p.Name(), err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.state = cmd, done, nil
	p.incs++
	p.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		p.mu.Lock()
		p.state = cmd.ProcessState
		p.mu.Unlock()
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if p.Healthy() == nil {
			return
		}
		select {
		case <-done:
			c.T.Fatalf("%s exited before answering /healthz; log: %s", p.Name(), tail(p.logPath))
		case <-time.After(10 * time.Millisecond): // poll again
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("%s: no /healthz within 10s; log: %s", p.Name(), tail(p.logPath))
		}
	}
}

func (c *cluster) signal(i int, sig syscall.Signal) {
	p := c.procs[i]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill SIGKILLs node i and waits until it is gone.
func (c *cluster) kill(i int) {
	c.procs[i].Down()
	c.signal(i, syscall.SIGCONT) // a stopped process must be able to die
	c.signal(i, syscall.SIGKILL)
	c.wait(i, 10*time.Second)
}

// term sends SIGTERM to node i: it closes (leaving the cluster gracefully)
// and exits. exited waits for that.
func (c *cluster) term(i int) {
	c.procs[i].Down()
	c.signal(i, syscall.SIGTERM)
}

// exited waits until node i, sent SIGTERM, exits, and fails the test if it
// did not exit 0 within 10s.
func (c *cluster) exited(i int) {
	c.T.Helper()
	if !c.wait(i, 10*time.Second) {
		c.T.Errorf("%s did not exit within 10s of SIGTERM", c.procs[i].Name())
		c.kill(i)
		return
	}
	p := c.procs[i]
	p.mu.Lock()
	st := p.state
	p.mu.Unlock()
	if st == nil || st.ExitCode() != 0 {
		c.T.Errorf("%s after SIGTERM: %v; log: %s", p.Name(), st, tail(p.logPath))
	}
}

// wait waits up to d for node i's process to exit.
func (c *cluster) wait(i int, d time.Duration) bool {
	p := c.procs[i]
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		p.CloseIdleConnections()
		return true
	case <-time.After(d):
		return false
	}
}

// restart starts node i again (same name and ports), waits until it sees
// the whole cluster, and marks it up. It returns how long that took.
func (c *cluster) restart(i int) time.Duration {
	c.T.Helper()
	start := time.Now()
	c.start(i)
	c.WaitConverged(c.Names(), 15*time.Second)
	c.procs[i].On()
	return time.Since(start)
}

// stopAll kills every node process and waits for it.
func (c *cluster) stopAll() {
	for i, p := range c.procs {
		c.kill(i)
		p.CloseIdleConnections()
	}
}

func (c *cluster) post(i int, path string) {
	c.T.Helper()
	if err := c.procs[i].Post(path); err != nil {
		c.T.Fatal(err)
	}
}

// partition cuts gossip and peer traffic between the groups (node indexes).
func (c *cluster) partition(groups ...[]int) {
	c.T.Helper()
	for gi, g := range groups {
		var block []string
		for gj, o := range groups {
			if gi == gj {
				continue
			}
			for _, j := range o {
				block = append(block, c.procs[j].Name()+"@"+c.procs[j].gossip)
			}
		}
		for _, i := range g {
			c.post(i, "/chaos/partition?block="+strings.Join(block, ","))
		}
	}
}

// cutPeers cuts the peer links from every other node to node v (v still
// reaches them); gossip still flows, so every ring keeps v, and the others'
// forwards to v fail.
func (c *cluster) cutPeers(v int) {
	c.T.Helper()
	for _, i := range c.Others(v) {
		c.post(i, "/chaos/peers?block="+c.procs[v].Name())
	}
}

func (c *cluster) heal() {
	for i := range c.procs {
		c.post(i, "/chaos/heal")
	}
}
