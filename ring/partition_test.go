package ring

import (
	"testing"
	"time"
)

// A partition is detected on both sides, and once it heals the reconnect
// loop merges the two halves again within a few reconnect intervals.
func TestMembershipPartitionHeals(t *testing.T) {
	p := NewPartition()
	ms := startCluster(t, 5, func(_ int, c *Config) { c.WrapTransport = p.Wrap })
	addr := func(i int) string { return ms[i].GossipAddr() }
	left, right := ms[:2], ms[2:]

	p.Split([]string{addr(0), addr(1)}, []string{addr(2), addr(3), addr(4)})
	took := waitFor(t, 5*time.Second, "each side to drop the other", func() bool {
		return allSee(left, names(2)) && allSee(right, []string{"node-2", "node-3", "node-4"})
	})
	t.Logf("partition detected on both sides after %v", took)

	p.Heal()
	// Merged: every member sees all five and has no one left to reconnect.
	took = waitFor(t, 10*time.Second, "the halves to merge", func() bool {
		if !allSee(ms, names(5)) {
			return false
		}
		for _, m := range ms {
			m.mu.Lock()
			n := len(m.failed)
			m.mu.Unlock()
			if n != 0 {
				return false
			}
		}
		return true
	})
	t.Logf("healed partition merged after %v", took)
	if took > 2*time.Second {
		t.Errorf("merging took %v, want a few reconnect intervals (%v each)", took, FastLocalConfig("").ReconnectInterval)
	}
}
