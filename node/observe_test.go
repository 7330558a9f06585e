package node_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// Decisions are counted by source and result from the start (Stats sums
// them), a shadow caller's denials apart, errors not at all; the latency is
// sampled only once observed, about one decision in LatencySampleEvery.
func TestDecisionStats(t *testing.T) {
	c := nodetest.Start(t, 2, nil)
	a, b := c.Nodes[0], c.Nodes[1]
	own := keysOwnedBy(a, a.Name(), 3)
	far := keysOwnedBy(a, b.Name(), 1)[0]
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 3, Window: time.Hour}

	for range 100 { // not observed yet: counted, not timed
		a.Allow(ctx, own[2], rule)
	}
	if s := a.DecisionStats(); s.Counts[ringlimit.Local] != [3]uint64{3, 97, 0} || s.Latency[ringlimit.Local].Count != 0 {
		t.Fatalf("before ObserveDecisions: counts %v, latency sample %d; want 3 allowed, 97 denied, none timed",
			s.Counts, s.Latency[ringlimit.Local].Count)
	}
	if st := a.Stats(); st.Decisions[ringlimit.Local] != 100 {
		t.Fatalf("Stats().Decisions %v: want the 100 counted", st.Decisions)
	}
	a.ObserveDecisions()
	for range 5 { // 3 allowed, 2 denied
		a.Allow(ctx, own[0], rule)
	}
	for range 4 { // 3 allowed, 1 shadow-denied
		a.Allow(ringlimit.WithShadow(ctx), own[1], rule)
	}
	for range 4 { // 3 allowed, 1 denied, by the peer
		a.Allow(ctx, far, rule)
	}
	if _, err := a.AllowN(ctx, own[0], rule, 4); err == nil { // more than the capacity
		t.Fatal("no error for n > capacity")
	}
	const bulk = 64 * 200
	big := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	for range bulk {
		a.Allow(ctx, own[0], big)
	}

	s := a.DecisionStats()
	var want [4][3]uint64
	want[ringlimit.Local] = [3]uint64{3 + 3 + 3 + bulk, 97 + 2, 1}
	want[ringlimit.Peer] = [3]uint64{3, 1, 0}
	if s.Counts != want {
		t.Errorf("counts %v, want %v", s.Counts, want)
	}
	lat := s.Latency[ringlimit.Local]
	var sum uint64
	for _, n := range lat.Buckets {
		sum += n
	}
	// About bulk/64 = 200 timed; a binomial's 5 sigma is about 70.
	if lat.Count != sum || lat.Count < 100 || lat.Count > 300 || lat.Sum <= 0 {
		t.Errorf("local latency sample: count %d (buckets %d), sum %s; want about %d", lat.Count, sum, lat.Sum, bulk/64)
	}
	if n := len(node.LatencyBounds()); n != len(lat.Buckets)-1 {
		t.Errorf("%d bounds for %d buckets", n, len(lat.Buckets))
	}
}

func TestObservedOwnedKeyAllocatesNothing(t *testing.T) {
	c := nodetest.Start(t, 2, nil)
	a := c.Nodes[0]
	a.ObserveDecisions()
	key := keysOwnedBy(a, a.Name(), 1)[0]
	rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	a.Allow(ctx, key, rule)
	if allocs := testing.AllocsPerRun(10000, func() { a.Allow(ctx, key, rule) }); allocs != 0 {
		t.Fatalf("%v allocs per observed owned-key decision", allocs)
	}
	if s := a.DecisionStats(); s.Latency[ringlimit.Local].Count == 0 {
		t.Fatal("10000 decisions and none timed")
	}
}
