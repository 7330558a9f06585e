package chaos

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/node"
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

// proc is one node process. Its ports are chosen once, so a restarted node
// keeps them.
type proc struct {
	name                 string
	gossip, rpc, httpAdr string
	logPath              string

	up    atomic.Bool   // the harness sends it traffic
	epoch atomic.Uint64 // bumped whenever the harness takes it down

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{} // closed when cmd has exited
	state *os.ProcessState
	incs  int // processes started under this name

	tr     *http.Transport
	client *http.Client
}

// cluster is a store server and node processes on loopback.
type cluster struct {
	t      *testing.T
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
	c := &cluster{t: t, bin: bin, secret: hex.EncodeToString(key), store: valkeytest.Start(t)}
	dir := t.TempDir()
	for i := range n {
		p := &proc{
			name:    fmt.Sprintf("n%d", i+1),
			gossip:  freeAddr(t, true),
			rpc:     freeAddr(t, false),
			httpAdr: freeAddr(t, false),
			logPath: filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)),
		}
		p.tr = &http.Transport{MaxIdleConnsPerHost: 32, DisableCompression: true}
		p.client = &http.Client{Transport: p.tr, Timeout: 3 * time.Second}
		c.procs = append(c.procs, p)
	}
	t.Cleanup(c.stopAll)
	for i := range c.procs {
		c.start(i)
	}
	c.waitConverged(c.names(), 15*time.Second)
	for _, p := range c.procs {
		p.up.Store(true)
	}
	return c
}

func (c *cluster) names() []string {
	var s []string
	for _, p := range c.procs {
		s = append(s, p.name)
	}
	return s
}

// start starts node i's process and waits until it answers /healthz. It
// does not mark it up.
func (c *cluster) start(i int) {
	c.t.Helper()
	p := c.procs[i]
	var join []string
	for _, o := range c.procs {
		if o != p {
			join = append(join, o.gossip)
		}
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(c.bin,
		"-name", p.name, "-gossip", p.gossip, "-rpc", p.rpc, "-http", p.httpAdr,
		"-join", strings.Join(join, ","), "-valkey", c.store.Addr(),
		"-forward-timeout", forwardTimeout.String(), "-store-timeout", storeTimeout.String(), "-v")
	cmd.Env = append(os.Environ(), "CHAOSNODE_SECRET="+c.secret)
	cmd.Stdout, cmd.Stderr = log, log
	// Die with the test binary, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", p.name, err)
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
		resp, err := p.client.Get("http://" + p.httpAdr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-done:
			c.t.Fatalf("%s exited before answering /healthz; log: %s", p.name, tail(p.logPath))
		case <-time.After(10 * time.Millisecond): // poll again
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: no /healthz within 10s; log: %s", p.name, tail(p.logPath))
		}
	}
}

// down takes node i out of the load before a fault.
func (c *cluster) down(i int) {
	p := c.procs[i]
	p.up.Store(false)
	p.epoch.Add(1)
	// A connection the client dialled but never used would hold up the
	// node's graceful HTTP shutdown.
	p.tr.CloseIdleConnections()
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
	c.down(i)
	c.signal(i, syscall.SIGCONT) // a stopped process must be able to die
	c.signal(i, syscall.SIGKILL)
	c.wait(i, 10*time.Second)
}

// term sends SIGTERM to node i: it closes (leaving the cluster gracefully)
// and exits. exited waits for that.
func (c *cluster) term(i int) {
	c.down(i)
	c.signal(i, syscall.SIGTERM)
}

// exited waits until node i, sent SIGTERM, exits, and fails the test if it
// did not exit 0 within 10s.
func (c *cluster) exited(i int) {
	c.t.Helper()
	if !c.wait(i, 10*time.Second) {
		c.t.Errorf("%s did not exit within 10s of SIGTERM", c.procs[i].name)
		c.kill(i)
		return
	}
	p := c.procs[i]
	p.mu.Lock()
	st := p.state
	p.mu.Unlock()
	if st == nil || st.ExitCode() != 0 {
		c.t.Errorf("%s after SIGTERM: %v; log: %s", p.name, st, tail(p.logPath))
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
		p.tr.CloseIdleConnections()
		return true
	case <-time.After(d):
		return false
	}
}

// restart starts node i again (same name and ports), waits until it sees
// the whole cluster, and marks it up. It returns how long that took.
func (c *cluster) restart(i int) time.Duration {
	c.t.Helper()
	start := time.Now()
	c.start(i)
	c.waitConverged(c.names(), 15*time.Second)
	c.procs[i].up.Store(true)
	return time.Since(start)
}

// stopAll kills every node process and waits for it.
func (c *cluster) stopAll() {
	for i, p := range c.procs {
		c.kill(i)
		p.tr.CloseIdleConnections()
	}
}

// nodeStats mirrors chaosnode's /stats.
type nodeStats struct {
	Name       string     `json:"name"`
	Members    []string   `json:"members"`
	Goroutines int        `json:"goroutines"`
	FDs        int        `json:"fds"`
	Node       node.Stats `json:"node"`
}

func (c *cluster) stats(i int) (nodeStats, error) {
	var s nodeStats
	p := c.procs[i]
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAdr+"/stats", nil)
	resp, err := p.client.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("%s /stats: %s", p.name, resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func (c *cluster) post(i int, path string) {
	c.t.Helper()
	p := c.procs[i]
	resp, err := p.client.Post("http://"+p.httpAdr+path, "text/plain", nil)
	if err != nil {
		c.t.Fatalf("%s POST %s: %v", p.name, path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("%s POST %s: %s", p.name, path, resp.Status)
	}
}

// partition cuts gossip and peer traffic between the groups (node indexes).
func (c *cluster) partition(groups ...[]int) {
	c.t.Helper()
	for gi, g := range groups {
		var block []string
		for gj, o := range groups {
			if gi == gj {
				continue
			}
			for _, j := range o {
				block = append(block, c.procs[j].name+"@"+c.procs[j].gossip)
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
	c.t.Helper()
	for _, i := range c.others(v) {
		c.post(i, "/chaos/peers?block="+c.procs[v].name)
	}
}

func (c *cluster) heal() {
	for i := range c.procs {
		c.post(i, "/chaos/heal")
	}
}

// sees reports whether node i answers /stats with exactly want as members.
func (c *cluster) sees(i int, want []string) bool {
	s, err := c.stats(i)
	return err == nil && slices.Equal(s.Members, want)
}

// waitView polls until each node in idx sees exactly want, or fails after d.
// It returns how long it waited.
func (c *cluster) waitView(idx []int, want []string, d time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	want = slices.Sorted(slices.Values(want))
	for {
		ok := true
		for _, i := range idx {
			if !c.sees(i, want) {
				ok = false
				break
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > d {
			var views []string
			for _, i := range idx {
				s, err := c.stats(i)
				views = append(views, fmt.Sprintf("%s (answered as %q): %v %v", c.procs[i].name, s.Name, s.Members, err))
			}
			c.t.Fatalf("no convergence on %v within %s: %s", want, d, strings.Join(views, "; "))
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

// waitConverged waits until every running node sees exactly want.
func (c *cluster) waitConverged(want []string, d time.Duration) time.Duration {
	c.t.Helper()
	var idx []int
	for i, p := range c.procs {
		if slices.Contains(want, p.name) {
			idx = append(idx, i)
		}
	}
	return c.waitView(idx, want, d)
}

// without returns the names of every node except those at idx.
func (c *cluster) without(idx ...int) []string {
	var s []string
	for i, p := range c.procs {
		if !slices.Contains(idx, i) {
			s = append(s, p.name)
		}
	}
	return s
}

// others returns every node index except those in idx.
func (c *cluster) others(idx ...int) []int {
	var s []int
	for i := range c.procs {
		if !slices.Contains(idx, i) {
			s = append(s, i)
		}
	}
	return s
}
