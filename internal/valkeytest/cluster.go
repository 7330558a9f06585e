package valkeytest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Slots is the number of hash slots of a Valkey Cluster.
const Slots = 16384

// Cluster is a Valkey Cluster of masters without replicas, each its own
// server process on loopback, made with CLUSTER ADDSLOTSRANGE and CLUSTER
// MEET. It runs with cluster-require-full-coverage no, so the surviving
// masters keep serving their slots while one is down.
type Cluster struct {
	t testing.TB
	// Masters are the servers, in slot order: Masters[i] serves the i-th
	// of len(Masters) equal ranges of slots.
	Masters []*Server
}

// StartCluster starts masters servers in cluster mode (each with its own
// free data and bus ports), assigns each an equal range of the 16384 slots,
// introduces them to each other and waits until every one reports
// cluster_state:ok. The servers stop when the test ends.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("valkeytest: cluster of %d masters", masters)
	}
	c := &Cluster{t: t}
	for range masters {
		c.Masters = append(c.Masters, start(t, clusterArgs))
	}
	for i, s := range c.Masters {
		lo, hi := c.SlotRange(i)
		if _, err := do(s.Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			t.Fatalf("valkeytest: %s: add slots %d-%d: %v", s.Addr(), lo, hi, err)
		}
		if i > 0 {
			if _, err := do(s.Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(c.Masters[0].port), busPort(c.Masters[0])); err != nil {
				t.Fatalf("valkeytest: %s: meet: %v", s.Addr(), err)
			}
		}
	}
	c.WaitOK()
	return c
}

// clusterArgs are the arguments of a cluster node on port: the bus on a
// free port of its own (not port+10000, which may be taken or out of range)
// and a short node timeout, so a killed master is marked failed within a
// second.
func clusterArgs(int) ([]string, error) {
	bus, err := freePort()
	if err != nil {
		return nil, err
	}
	return []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-port", strconv.Itoa(bus),
		"--cluster-node-timeout", "500",
		"--cluster-require-full-coverage", "no",
	}, nil
}

// busPort returns s's --cluster-port argument.
func busPort(s *Server) string {
	for i, a := range s.args {
		if a == "--cluster-port" && i+1 < len(s.args) {
			return s.args[i+1]
		}
	}
	return ""
}

// SlotRange returns the first and last slot of Masters[i].
func (c *Cluster) SlotRange(i int) (lo, hi int) {
	n := len(c.Masters)
	return i * Slots / n, (i+1)*Slots/n - 1
}

// Master returns the index in Masters of the master that serves slot.
func (c *Cluster) Master(slot int) int {
	for i := range c.Masters {
		if _, hi := c.SlotRange(i); slot <= hi {
			return i
		}
	}
	return -1
}

// Addrs returns every master's address.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, s := range c.Masters {
		addrs[i] = s.Addr()
	}
	return addrs
}

// WaitOK waits, at most 20 s, until every running master reports
// cluster_state:ok and knows every other master.
func (c *Cluster) WaitOK() {
	c.t.Helper()
	want := "cluster_known_nodes:" + strconv.Itoa(len(c.Masters))
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range c.Masters {
		s.mu.Lock()
		running := s.cmd != nil
		s.mu.Unlock()
		if !running {
			continue
		}
		for polls := 1; ; polls++ {
			info, err := do(s.Addr(), "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want) {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("valkeytest: %s: cluster not ok within 20s: %q, %v", s.Addr(), info, err)
			}
			if polls%50 == 0 {
				// Every second, the introductions again: a MEET whose
				// handshake outlived the 500 ms node timeout is dropped
				// (beside busy loops a master stayed unknown for 20 s),
				// and MEET is harmless between members that know each
				// other.
				c.meetAgain()
			}
			time.Sleep(20 * time.Millisecond) // poll the server again
		}
	}
}

// FlushScripts sends SCRIPT FLUSH to every master: the next EVALSHA on each
// finds no script.
func (c *Cluster) FlushScripts() {
	c.t.Helper()
	for _, s := range c.Masters {
		if _, err := do(s.Addr(), "SCRIPT", "FLUSH"); err != nil {
			c.t.Fatalf("valkeytest: %s: script flush: %v", s.Addr(), err)
		}
	}
}

// do sends one command over a fresh connection and reads a simple-string,
// integer or bulk-string reply; an error reply is an error.
func do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("%s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 || n > 1<<20 {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// meetAgain has every running master but the first MEET the first (if it
// runs), as StartCluster did. Errors are left to WaitOK's deadline.
func (c *Cluster) meetAgain() {
	running := func(s *Server) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.cmd != nil
	}
	first := c.Masters[0]
	if !running(first) {
		return
	}
	for _, s := range c.Masters[1:] {
		if running(s) {
			_, _ = do(s.Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(first.port), busPort(first))
		}
	}
}
