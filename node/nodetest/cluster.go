package nodetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/node"
)

// Cluster is a set of nodes in one process, on 127.0.0.1, on one Network.
type Cluster struct {
	Network   *Network
	Nodes     []*node.Node
	secret    []byte
	configure func(*node.Config)
}

// Secret returns the SecretKey the nodes of a Cluster share.
func Secret() []byte { return []byte("nodetest-secret-0123456789abcdef") }

// Start starts n nodes named n1…nN with the fast gossip preset, joins them,
// and waits until every node sees all n. Forwards may take a second (a cold
// dial on a loaded test machine can take longer than the 50 ms default);
// tests of timeouts set their own. configure, if not nil, adjusts each
// node's Config before it starts. The nodes are closed when the test ends.
func Start(t testing.TB, n int, configure func(*node.Config)) *Cluster {
	t.Helper()
	c := &Cluster{Network: NewNetwork(), secret: Secret(), configure: configure}
	for i := range n {
		c.Nodes = append(c.Nodes, c.start(t, fmt.Sprintf("n%d", i+1), c.Nodes))
	}
	c.WaitMembers(t, 10*time.Second, c.Nodes...)
	return c
}

// start starts a node named name that joins the given nodes, and closes it
// when the test ends.
func (c *Cluster) start(t testing.TB, name string, join []*node.Node) *node.Node {
	t.Helper()
	var addrs []string
	for _, nd := range join {
		addrs = append(addrs, nd.GossipAddr())
	}
	cfg := node.Config{
		Name:           name,
		GossipAddr:     "127.0.0.1:0",
		RPCAddr:        "127.0.0.1:0",
		Join:           addrs,
		SecretKey:      c.secret,
		Gossip:         node.GossipFast,
		Network:        c.Network,
		ForwardTimeout: time.Second,
	}
	if c.configure != nil {
		c.configure(&cfg)
	}
	nd, err := node.New(cfg)
	if err != nil {
		t.Fatalf("nodetest: start %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() { nd.Close() })
	c.Network.Register(cfg.Name, nd.GossipAddr())
	return nd
}

// Restart closes c.Nodes[i] (a graceful leave), waits until the others see
// it gone, starts a node of the same name and configuration that joins
// them, puts it in c.Nodes[i] and waits until every node sees all of them.
func (c *Cluster) Restart(t testing.TB, i int) *node.Node {
	t.Helper()
	others := slices.Delete(slices.Clone(c.Nodes), i, i+1)
	if err := c.Nodes[i].Close(); err != nil {
		t.Fatalf("nodetest: close %s: %v", c.Nodes[i].Name(), err)
	}
	c.WaitMembers(t, 10*time.Second, others...)
	c.Nodes[i] = c.start(t, c.Nodes[i].Name(), others)
	c.WaitMembers(t, 10*time.Second, c.Nodes...)
	return c.Nodes[i]
}

// Add starts one more node (named n<N+1>), joins it to the others and waits
// until every node sees all of them.
func (c *Cluster) Add(t testing.TB) *node.Node {
	t.Helper()
	nd := c.start(t, fmt.Sprintf("n%d", len(c.Nodes)+1), c.Nodes)
	c.Nodes = append(c.Nodes, nd)
	c.WaitMembers(t, 10*time.Second, c.Nodes...)
	return nd
}

// WaitSettled waits until every node of c sees all of them and no ring
// change is open on any (Stats().Changing): keys are where the ring says.
// Right after Start a change can still be open, and a key picked by the
// ring may be decided by its previous holder for a moment. A change that
// some member never says Done for keeps Changing true for HandoffWindow
// after it (10 s by default): a timeout shorter than that fails on any
// ring change after the members converged, such as a live member that the
// gossip preset wrongly declared failed and that came back (GossipFast on
// a starved host).
func (c *Cluster) WaitSettled(t testing.TB, timeout time.Duration) {
	t.Helper()
	c.WaitMembers(t, timeout, c.Nodes...)
	deadline := time.Now().Add(timeout)
	for {
		settled := true
		for _, nd := range c.Nodes {
			if len(nd.Members()) != len(c.Nodes) || nd.Stats().Changing {
				settled = false
				break
			}
		}
		if settled {
			return
		}
		if time.Now().After(deadline) {
			for _, nd := range c.Nodes {
				st := nd.Stats()
				t.Logf("%s sees %v, changing %v, ring changes open %d", nd.Name(), nd.Members(), st.Changing, st.Sources)
			}
			t.Fatalf("nodetest: the cluster did not settle within %s", timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
}

// WaitMembers waits until each of nodes sees exactly the given nodes as
// members, or fails the test after timeout.
func (c *Cluster) WaitMembers(t testing.TB, timeout time.Duration, nodes ...*node.Node) {
	t.Helper()
	var want []string
	for _, nd := range nodes {
		want = append(want, nd.Name())
	}
	slices.Sort(want)
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for _, nd := range nodes {
			if !slices.Equal(nd.Members(), want) {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, nd := range nodes {
				t.Logf("%s sees %v", nd.Name(), nd.Members())
			}
			t.Fatalf("nodetest: members did not converge to %v within %s", want, timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling membership, with a deadline
	}
}
