package netchaos

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
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

// cnode is one node container: the node as the harness reaches it, and
// the container it runs in. A restarted node keeps its name; its address
// changes only when the scenario says so.
type cnode struct {
	*chaoskit.Node
	addr   string        // the address it has or will have (others join it there)
	offset time.Duration // its clock's offset (-clock-offset)
	image  string        // the image it runs; if empty, the cluster's node image
	ctr    atomic.Pointer[container]
}

func (p *cnode) ip() string { return p.ctr.Load().ip }

// cluster is a store container and node containers on one private network.
// cnodes[i] is Nodes[i]'s container.
type cluster struct {
	chaoskit.Cluster
	im     images
	nw     *network
	secret string
	store  *container
	cnodes []*cnode
	runs   int    // containers started, for unique names
	limits limits // every node container's
	// retired is, for each node, the most times one container removed
	// before the end dropped it (see retire): drops counts them too.
	retired map[string]int
}

// limits is how a cluster's node containers run: under a CFS CPU quota or
// not, and with which timeout ceilings.
type limits struct {
	cpus           string        // docker run --cpus ("": no quota)
	forward, store time.Duration // -forward-timeout, -store-timeout
	lan            bool          // -lan: node.GossipLAN, the default preset (else GossipFast)
}

// suiteLimits are every scenario's but CPU throttling's: no quota, the
// suite's timeouts.
func suiteLimits() limits { return limits{forward: forwardTimeout, store: storeTimeout} }

// startCluster starts a network, a store and len(offsets) nodes (node i's
// clock offset by offsets[i]), each run as lim says, and waits until every
// node sees every other.
func startCluster(t *testing.T, im images, offsets []time.Duration, lim limits) *cluster {
	t.Helper()
	key := make([]byte, 32)
	if _, err := crand.Read(key); err != nil {
		t.Fatal(err)
	}
	c := &cluster{Cluster: chaoskit.Cluster{T: t, Poll: 20 * time.Millisecond}, im: im, nw: newNetwork(t), secret: hex.EncodeToString(key), limits: lim}
	c.startStore()
	for i, off := range offsets {
		p := &cnode{Node: chaoskit.NewNode(fmt.Sprintf("n%d", i+1), 16), addr: c.nw.ip(firstNodeHost + i), offset: off}
		c.cnodes = append(c.cnodes, p)
		c.Nodes = append(c.Nodes, p.Node)
	}
	t.Cleanup(func() {
		for _, p := range c.cnodes {
			p.CloseIdleConnections()
		}
	})
	for i := range c.cnodes {
		c.start(i)
	}
	c.WaitConverged(c.Names(), 30*time.Second)
	for _, p := range c.cnodes {
		p.On()
	}
	return c
}

func (c *cluster) startStore() {
	c.store = runContainer(c.T, c.nw, c.nw.name+"-store", c.nw.ip(storeHost), nil, nil, c.im.store,
		"--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no")
}

func (c *cluster) storeAddr() string { return c.store.ip + ":6379" }

// start runs node i's container at its address and waits until it answers
// /healthz. It does not mark it up. It joins every other node's address,
// started or not (the first node's join is answered once a second is up;
// a restarted node finds the others).
func (c *cluster) start(i int) {
	c.T.Helper()
	p := c.cnodes[i]
	var join []string
	for _, o := range c.cnodes {
		if o != p {
			join = append(join, o.addr+":"+gossipPort)
		}
	}
	c.runs++
	name := fmt.Sprintf("%s-%s-%d", c.nw.name, p.Name(), c.runs)
	var flags []string
	if c.limits.cpus != "" {
		flags = []string{"--cpus", c.limits.cpus}
	}
	image := p.image
	if image == "" {
		image = c.im.node
	}
	args := []string{"-name", p.Name(), "-gossip", "0.0.0.0:" + gossipPort, "-rpc", "0.0.0.0:" + rpcPort, "-http", "0.0.0.0:" + httpPort,
		"-join", strings.Join(join, ","), "-valkey", c.storeAddr(),
		"-forward-timeout", c.limits.forward.String(), "-store-timeout", c.limits.store.String(),
		"-clock-offset", p.offset.String(), "-v"}
	if c.limits.lan {
		args = append(args, "-lan")
	}
	ctr := runContainer(c.T, c.nw, name, p.addr, flags, []string{"CHAOSNODE_SECRET=" + c.secret}, image, args...)
	p.ctr.Store(ctr)
	p.SetAddr(ctr.ip + ":" + httpPort)
	c.waitHealthy(i)
}

// waitHealthy polls node i's /healthz for up to 20s.
func (c *cluster) waitHealthy(i int) {
	c.T.Helper()
	p := c.cnodes[i]
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := p.Healthy()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("%s: no /healthz within 20s: %v; log: %s", p.Name(), err, p.ctr.Load().logs())
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
}

// kill SIGKILLs node i's container (a crash: it leaves nothing behind).
func (c *cluster) kill(i int) {
	c.T.Helper()
	c.cnodes[i].Down()
	mustDocker(c.T, "kill", c.cnodes[i].ctr.Load().name)
}

// term stops node i's container with SIGTERM (it leaves the cluster
// gracefully) and waits up to 15s for it to exit, then checks it exited 0.
func (c *cluster) term(i int) {
	c.T.Helper()
	c.cnodes[i].Down()
	ctr := c.cnodes[i].ctr.Load()
	mustDocker(c.T, "stop", "-t", "15", ctr.name)
	if code := mustDocker(c.T, "inspect", "-f", "{{.State.ExitCode}}", ctr.name); code != "0" {
		c.T.Errorf("%s exited %s after SIGTERM; log: %s", c.cnodes[i].Name(), code, ctr.logs())
	}
}

// restart starts node i's stopped container again (same address), waits
// until every node sees the whole cluster, and marks it up. It returns how
// long that took.
func (c *cluster) restart(i int) time.Duration {
	c.T.Helper()
	start := time.Now()
	mustDocker(c.T, "start", c.cnodes[i].ctr.Load().name)
	c.waitHealthy(i)
	c.WaitConverged(c.Names(), 30*time.Second)
	c.cnodes[i].On()
	return time.Since(start)
}

// restartAt removes node i's container and runs a new one of the same name
// at ip; as restart.
func (c *cluster) restartAt(i int, ip string) time.Duration {
	c.T.Helper()
	start := time.Now()
	mustDocker(c.T, "rm", "-f", c.cnodes[i].ctr.Load().name)
	c.cnodes[i].addr = ip
	c.start(i)
	c.WaitConverged(c.Names(), 30*time.Second)
	c.cnodes[i].On()
	return time.Since(start)
}
