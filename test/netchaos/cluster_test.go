package netchaos

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node"
)

// Timeouts given to every node, and the ports every node container uses.
const (
	forwardTimeout = 50 * time.Millisecond
	storeTimeout   = 50 * time.Millisecond
	gossipPort     = "7946"
	rpcPort        = "7947"
	httpPort       = "8080"
	storeHost      = 100 // the store's address on the network: prefix+100
	firstNodeHost  = 11  // node i's: prefix+11+i (a node moved to a new address: +50)
)

// cnode is one node container. A restarted node keeps its name; its
// address changes only when the scenario says so.
type cnode struct {
	name   string
	addr   string        // the address it has or will have (others join it there)
	offset time.Duration // its clock's offset (-clock-offset)
	ctr    atomic.Pointer[container]

	up    atomic.Bool   // the harness sends it traffic
	epoch atomic.Uint64 // bumped whenever the harness takes it down

	tr     *http.Transport
	client *http.Client
}

func (p *cnode) ip() string   { return p.ctr.Load().ip }
func (p *cnode) base() string { return "http://" + p.ip() + ":" + httpPort }

// cluster is a store container and node containers on one private network.
type cluster struct {
	t      *testing.T
	im     images
	nw     *network
	secret string
	store  *container
	nodes  []*cnode
	runs   int // containers started, for unique names
}

// startCluster starts a network, a store and len(offsets) nodes (node i's
// clock offset by offsets[i]), and waits until every node sees every other.
func startCluster(t *testing.T, im images, offsets []time.Duration) *cluster {
	t.Helper()
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, im: im, nw: newNetwork(t), secret: hex.EncodeToString(key)}
	c.startStore()
	for i, off := range offsets {
		p := &cnode{name: fmt.Sprintf("n%d", i+1), addr: c.nw.ip(firstNodeHost + i), offset: off}
		p.tr = &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}
		p.client = &http.Client{Transport: p.tr, Timeout: 3 * time.Second}
		c.nodes = append(c.nodes, p)
	}
	t.Cleanup(func() {
		for _, p := range c.nodes {
			p.tr.CloseIdleConnections()
		}
	})
	for i := range c.nodes {
		c.start(i)
	}
	c.waitConverged(c.names(), 30*time.Second)
	for _, p := range c.nodes {
		p.up.Store(true)
	}
	return c
}

func (c *cluster) startStore() {
	c.store = runContainer(c.t, c.nw, c.nw.name+"-store", c.nw.ip(storeHost), nil, c.im.store,
		"--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no")
}

func (c *cluster) storeAddr() string { return c.store.ip + ":6379" }

func (c *cluster) names() []string {
	var s []string
	for _, p := range c.nodes {
		s = append(s, p.name)
	}
	return s
}

// start runs node i's container at its address and waits until it answers
// /healthz. It does not mark it up. It joins every other node's address,
// started or not (the first node's join is answered once a second is up;
// a restarted node finds the others).
func (c *cluster) start(i int) {
	c.t.Helper()
	p := c.nodes[i]
	var join []string
	for _, o := range c.nodes {
		if o != p {
			join = append(join, o.addr+":"+gossipPort)
		}
	}
	c.runs++
	name := fmt.Sprintf("%s-%s-%d", c.nw.name, p.name, c.runs)
	ctr := runContainer(c.t, c.nw, name, p.addr, []string{"CHAOSNODE_SECRET=" + c.secret}, c.im.node,
		"-name", p.name, "-gossip", "0.0.0.0:"+gossipPort, "-rpc", "0.0.0.0:"+rpcPort, "-http", "0.0.0.0:"+httpPort,
		"-join", strings.Join(join, ","), "-valkey", c.storeAddr(),
		"-forward-timeout", forwardTimeout.String(), "-store-timeout", storeTimeout.String(),
		"-clock-offset", p.offset.String(), "-v")
	p.ctr.Store(ctr)
	c.waitHealthy(i)
}

// waitHealthy polls node i's /healthz for up to 20s.
func (c *cluster) waitHealthy(i int) {
	c.t.Helper()
	p := c.nodes[i]
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := p.client.Get(p.base() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: no /healthz within 20s: %v; log: %s", p.name, err, p.ctr.Load().logs())
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// down takes node i out of the load before a fault.
func (c *cluster) down(i int) {
	p := c.nodes[i]
	p.up.Store(false)
	p.epoch.Add(1)
	p.tr.CloseIdleConnections()
}

// kill SIGKILLs node i's container (a crash: it leaves nothing behind).
func (c *cluster) kill(i int) {
	c.t.Helper()
	c.down(i)
	mustDocker(c.t, "kill", c.nodes[i].ctr.Load().name)
}

// term stops node i's container with SIGTERM (it leaves the cluster
// gracefully) and waits up to 15s for it to exit, then checks it exited 0.
func (c *cluster) term(i int) {
	c.t.Helper()
	c.down(i)
	ctr := c.nodes[i].ctr.Load()
	mustDocker(c.t, "stop", "-t", "15", ctr.name)
	if code := mustDocker(c.t, "inspect", "-f", "{{.State.ExitCode}}", ctr.name); code != "0" {
		c.t.Errorf("%s exited %s after SIGTERM; log: %s", c.nodes[i].name, code, ctr.logs())
	}
}

// restart starts node i's stopped container again (same address), waits
// until every node sees the whole cluster, and marks it up. It returns how
// long that took.
func (c *cluster) restart(i int) time.Duration {
	c.t.Helper()
	start := time.Now()
	mustDocker(c.t, "start", c.nodes[i].ctr.Load().name)
	c.waitHealthy(i)
	c.waitConverged(c.names(), 30*time.Second)
	c.nodes[i].up.Store(true)
	return time.Since(start)
}

// restartAt removes node i's container and runs a new one of the same name
// at ip; as restart.
func (c *cluster) restartAt(i int, ip string) time.Duration {
	c.t.Helper()
	start := time.Now()
	mustDocker(c.t, "rm", "-f", c.nodes[i].ctr.Load().name)
	c.nodes[i].addr = ip
	c.start(i)
	c.waitConverged(c.names(), 30*time.Second)
	c.nodes[i].up.Store(true)
	return time.Since(start)
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
	p := c.nodes[i]
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base()+"/stats", nil)
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
				views = append(views, fmt.Sprintf("%s: %v %v", c.nodes[i].name, s.Members, err))
			}
			c.t.Fatalf("no convergence on %v within %s: %s", want, d, strings.Join(views, "; "))
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// waitConverged waits until every node named in want sees exactly want.
func (c *cluster) waitConverged(want []string, d time.Duration) time.Duration {
	c.t.Helper()
	var idx []int
	for i, p := range c.nodes {
		if slices.Contains(want, p.name) {
			idx = append(idx, i)
		}
	}
	return c.waitView(idx, want, d)
}

// without returns the names of every node except those at idx.
func (c *cluster) without(idx ...int) []string {
	var s []string
	for i, p := range c.nodes {
		if !slices.Contains(idx, i) {
			s = append(s, p.name)
		}
	}
	return s
}

// others returns every node index except those in idx.
func (c *cluster) others(idx ...int) []int {
	var s []int
	for i := range c.nodes {
		if !slices.Contains(idx, i) {
			s = append(s, i)
		}
	}
	return s
}
