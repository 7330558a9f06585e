package netchaos

import (
	"bufio"
	"fmt"
	"maps"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Faults in the kernel: iptables rules in the nodes' namespaces.

// partition drops every packet between the groups (node indexes), both
// ways, in each node's namespace. The store stays reachable from all.
func (c *cluster) partition(groups ...[]int) {
	c.T.Helper()
	for gi, g := range groups {
		for gj, o := range groups {
			if gi == gj {
				continue
			}
			for _, i := range g {
				for _, j := range o {
					c.cnodes[i].ctr.Load().iptables(c.T,
						[]string{"-A", "INPUT", "-s", c.cnodes[j].ip(), "-j", "DROP"},
						[]string{"-A", "OUTPUT", "-d", c.cnodes[j].ip(), "-j", "DROP"})
				}
			}
		}
	}
}

// heal removes every rule from every running node's namespace.
func (c *cluster) heal() {
	c.T.Helper()
	for _, p := range c.cnodes {
		p.ctr.Load().flush(c.T)
	}
}

// blockPort drops every packet to or from port (TCP and UDP) on node v, except
// what goes to and from the store.
func (c *cluster) blockPort(v int, port string) {
	c.T.Helper()
	var rules [][]string
	for _, proto := range []string{"tcp", "udp"} {
		for _, dir := range []string{"--dport", "--sport"} {
			rules = append(rules,
				[]string{"-A", "INPUT", "-p", proto, dir, port, "!", "-s", c.store.ip, "-j", "DROP"},
				[]string{"-A", "OUTPUT", "-p", proto, dir, port, "!", "-d", c.store.ip, "-j", "DROP"})
		}
	}
	c.cnodes[v].ctr.Load().iptables(c.T, rules...)
}

// loss drops each packet node v sends or receives with probability p,
// except the harness's HTTP calls (a caller runs in the node's own process
// in production: no network between them).
func (c *cluster) loss(v int, p float64) {
	c.T.Helper()
	prob := fmt.Sprint(p)
	c.cnodes[v].ctr.Load().iptables(c.T,
		[]string{"-A", "INPUT", "-p", "tcp", "--dport", httpPort, "-j", "ACCEPT"},
		[]string{"-A", "INPUT", "-m", "statistic", "--mode", "random", "--probability", prob, "-j", "DROP"},
		[]string{"-A", "OUTPUT", "-p", "tcp", "--sport", httpPort, "-j", "ACCEPT"},
		[]string{"-A", "OUTPUT", "-m", "statistic", "--mode", "random", "--probability", prob, "-j", "DROP"})
}

// cutPeersTo drops the peer (RPC) connections from every other node to
// node v; gossip still flows, so every ring keeps v.
func (c *cluster) cutPeersTo(v int) {
	c.T.Helper()
	for _, i := range c.Others(v) {
		c.cnodes[i].ctr.Load().iptables(c.T,
			[]string{"-A", "OUTPUT", "-p", "tcp", "-d", c.cnodes[v].ip(), "--dport", rpcPort, "-j", "DROP"})
	}
}

// delay holds every packet node v sends (but its answers to the harness)
// for d: an NFQUEUE rule in v's namespace, and nfdelay, run there by
// nsenter, giving each packet its verdict d after it came. The rule
// bypasses the queue when nfdelay is not running. It returns a func that
// ends the delay (removing every rule in v's namespace).
func (c *cluster) delay(v int, d time.Duration, nfdelay string) func() {
	c.T.Helper()
	ctr := c.cnodes[v].ctr.Load()
	pid, err := ctr.pid()
	if err != nil {
		c.T.Fatal(err)
	}
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", nfdelay, "-queue", "7", "-delay", d.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.T.Fatal(err)
	}
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
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("nfdelay said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			stop()
			if strings.Contains(stderr.String(), "nfdelay: config") || strings.Contains(stderr.String(), "nfdelay: socket") {
				c.T.Skipf("netchaos: skipped: this kernel has no NFQUEUE to delay packets with (nfnetlink_queue): %s", stderr.String())
			}
			c.T.Fatalf("nfdelay in %s: %v: %s", ctr.name, err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		stop()
		c.T.Fatalf("nfdelay in %s: not ready within 10s: %s", ctr.name, stderr.String())
	}
	ctr.iptables(c.T,
		[]string{"-A", "OUTPUT", "-p", "tcp", "--sport", httpPort, "-j", "ACCEPT"},
		[]string{"-A", "OUTPUT", "-j", "NFQUEUE", "--queue-num", "7", "--queue-bypass"})
	return func() {
		ctr.flush(c.T)
		stop()
	}
}

// drops counts, for each node, the most times any one running node dropped
// it from its ring (see countDrops): each time its keys' next owner drops
// it, that node takes its keys over again, loading them from the store.
func (c *cluster) drops() map[string]int {
	most := maps.Clone(c.retired)
	if most == nil {
		most = map[string]int{}
	}
	for _, p := range c.cnodes {
		out, err := docker("logs", p.ctr.Load().name)
		if err != nil {
			c.T.Errorf("logs of %s: %v", p.Name(), err)
			continue
		}
		for name, k := range countDrops(out) {
			most[name] = max(most[name], k)
		}
	}
	return most
}

// retire keeps what node i's container saw of drops (see drops) before
// the scenario removes it: its log goes with it. It returns the log.
func (c *cluster) retire(i int) string {
	c.T.Helper()
	out, err := docker("logs", c.cnodes[i].ctr.Load().name)
	if err != nil {
		c.T.Errorf("logs of %s: %v", c.cnodes[i].Name(), err)
		return ""
	}
	if c.retired == nil {
		c.retired = map[string]int{}
	}
	for name, k := range countDrops(out) {
		c.retired[name] = max(c.retired[name], k)
	}
	return out
}

// countDrops counts, in a node's log, the "node: membership changed"
// events whose left list names each node.
func countDrops(log string) map[string]int {
	n := map[string]int{}
	for _, l := range lines(log) {
		if !strings.Contains(l, `msg="node: membership changed"`) {
			continue
		}
		_, left, _ := strings.Cut(l, " left=")
		left, _, _ = strings.Cut(strings.TrimLeft(left, `"[`), "]")
		for _, name := range strings.Fields(left) {
			n[name]++
		}
	}
	return n
}
