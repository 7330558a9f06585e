package valkeytest

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLifecycle(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("fresh server: %v", err)
	}
	s.Kill()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("killed server still answers")
	}
	s.Restart()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
	s.Pause()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("paused server answers")
	}
	s.Resume()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("resumed server: %v", err)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	for i, s := range c.Masters {
		lo, hi := c.SlotRange(i)
		if c.Master(lo) != i || c.Master(hi) != i {
			t.Fatalf("master %d: slots %d-%d map to %d and %d", i, lo, hi, c.Master(lo), c.Master(hi))
		}
		info, err := do(s.Addr(), "CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_slots_assigned:16384") {
			t.Fatalf("master %d: %q, %v", i, info, err)
		}
	}
	// Killing one master leaves the others serving (require-full-coverage
	// no); after a restart it is back in the cluster with its slots.
	c.Masters[1].Kill()
	c.WaitOK()
	c.Masters[1].Restart()
	c.WaitOK()
	if _, err := do(c.Masters[1].Addr(), "SET", "{a}", "1"); err == nil || !strings.Contains(err.Error(), "MOVED") {
		t.Fatalf("restarted master does not redirect a key of another master's slot: %v", err)
	}
	c.FlushScripts()
}
