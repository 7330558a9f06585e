package chaoskit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Cluster is what the harness knows of a cluster of chaosnodes: its nodes,
// in a fixed order (the scenarios name a node by its index), and the test
// that a wait fails. The suites embed it in their own cluster types, which
// add how the nodes run (processes, containers) and how they are faulted.
type Cluster struct {
	T     testing.TB
	Nodes []*Node
	Poll  time.Duration // how often WaitView asks the nodes; if zero, every 10 ms
}

// Names returns every node's name.
func (c *Cluster) Names() []string { return c.Without() }

// Targets returns the nodes as the load's targets.
func (c *Cluster) Targets() []Target {
	var s []Target
	for _, n := range c.Nodes {
		s = append(s, n)
	}
	return s
}

// Without returns the names of every node except those at idx.
func (c *Cluster) Without(idx ...int) []string {
	var s []string
	for i, n := range c.Nodes {
		if !slices.Contains(idx, i) {
			s = append(s, n.Name())
		}
	}
	return s
}

// Others returns every node index except those in idx.
func (c *Cluster) Others(idx ...int) []int {
	var s []int
	for i := range c.Nodes {
		if !slices.Contains(idx, i) {
			s = append(s, i)
		}
	}
	return s
}

// sees reports whether node i answers /stats with exactly want (sorted)
// as members.
func (c *Cluster) sees(i int, want []string) bool {
	s, err := c.Nodes[i].Stats()
	return err == nil && slices.Equal(s.Members, want)
}

// WaitView polls until each node in idx sees exactly want, or fails the
// test after d. It returns how long it waited.
func (c *Cluster) WaitView(idx []int, want []string, d time.Duration) time.Duration {
	c.T.Helper()
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
				s, err := c.Nodes[i].Stats()
				views = append(views, fmt.Sprintf("%s (answered as %q): %v %v", c.Nodes[i].Name(), s.Name, s.Members, err))
			}
			c.T.Fatalf("no convergence on %v within %s: %s", want, d, strings.Join(views, "; "))
		}
		time.Sleep(max(c.Poll, 10*time.Millisecond)) // poll interval
	}
}

// WaitConverged waits until every node named in want sees exactly want.
func (c *Cluster) WaitConverged(want []string, d time.Duration) time.Duration {
	c.T.Helper()
	var idx []int
	for i, n := range c.Nodes {
		if slices.Contains(want, n.Name()) {
			idx = append(idx, i)
		}
	}
	return c.WaitView(idx, want, d)
}

// CheckLeaks polls each survivor's /stats for up to 10 s until its
// goroutines and open files come back to within GoroutineSlack and FDSlack
// of base (its stats before the fault), and fails the test for each that
// does not. It returns each survivor's figures, "name g→g'/f→f'", for the
// table.
func (c *Cluster) CheckLeaks(base map[int]Stats, survivors []int) []string {
	c.T.Helper()
	var leak []string
	for _, i := range survivors {
		b := base[i]
		deadline := time.Now().Add(10 * time.Second)
		var s Stats
		var err error
		for {
			s, err = c.Nodes[i].Stats()
			if err == nil && s.Goroutines <= b.Goroutines+GoroutineSlack && s.FDs <= b.FDs+FDSlack {
				break
			}
			if time.Now().After(deadline) {
				c.T.Errorf("%s leaks: goroutines %d → %d, fds %d → %d (err %v)",
					c.Nodes[i].Name(), b.Goroutines, s.Goroutines, b.FDs, s.FDs, err)
				break
			}
			time.Sleep(50 * time.Millisecond) // poll interval
		}
		leak = append(leak, fmt.Sprintf("%s %d→%d/%d→%d", c.Nodes[i].Name(), b.Goroutines, s.Goroutines, b.FDs, s.FDs))
	}
	return leak
}
