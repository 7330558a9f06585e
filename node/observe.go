package node

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit"
)

// Decision results, the second index of DecisionStats.Counts.
const (
	ResultAllowed      = iota // the decision allowed the call
	ResultDenied              // the decision denied it
	ResultShadowDenied        // it denied a call whose ctx was marked with ringlimit.WithShadow
	numResults
)

// LatencySampleEvery is the sampling of the decision latency histogram: about
// one decision in LatencySampleEvery, chosen at random, is timed.
const LatencySampleEvery = 64

// latencyBounds are the upper bounds of the latency histogram's buckets: an
// owned decision takes about 0.1–1 µs, a forwarded one tens of µs, a store
// round trip 50 µs–1 ms, a timed-out one the timeouts (50 ms by default).
var latencyBounds = [...]time.Duration{
	250 * time.Nanosecond, 500 * time.Nanosecond,
	time.Microsecond, 2500 * time.Nanosecond, 5 * time.Microsecond,
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, time.Second,
}

// LatencyBounds returns the upper bounds of the latency histogram's buckets,
// ascending; DecisionLatency.Buckets has one more, for larger latencies.
func LatencyBounds() []time.Duration { return append([]time.Duration(nil), latencyBounds[:]...) }

// DecisionStats are the decisions this node returned to its callers, counted
// once ObserveDecisions was called.
type DecisionStats struct {
	// Counts by ringlimit.Source (who decided) and result (ResultAllowed,
	// ResultDenied, ResultShadowDenied). Exact: every decision is counted.
	// Peeks (AllowN with n == 0) are decisions too; calls that returned an
	// error are not.
	Counts [4][numResults]uint64
	// Latency by ringlimit.Source, from the call to AllowN to its return,
	// of about one decision in LatencySampleEvery: its counts are sampled.
	Latency [4]DecisionLatency
}

// DecisionLatency is a histogram of sampled decision latencies.
type DecisionLatency struct {
	// Buckets[i] counts the sampled decisions that took at most
	// LatencyBounds()[i] and more than the bound before it (not
	// cumulative); the last counts those above the largest bound.
	Buckets [len(latencyBounds) + 1]uint64
	// Count is the number of sampled decisions; Sum their total latency.
	Count uint64
	Sum   time.Duration
}

// observer holds the counters of DecisionStats. Decisions are always
// counted, by source and result (Stats().Decisions sums them): one atomic add
// per decision, as before there were metrics. Latency is sampled only once
// on is set, so a node nobody observes pays one atomic load more.
type observer struct {
	on     atomic.Bool
	counts [4][numResults]paddedCounter
	lat    [4]latencyCounters
	queue  atomic.Int64 // states waiting in the write-behind queue
}

type latencyCounters struct {
	buckets [len(latencyBounds) + 1]atomic.Uint64
	sum     atomic.Uint64 // ns
}

// ObserveDecisions starts timing a sample of the decisions (see
// DecisionStats; they are counted by source and result from the start). The
// sample costs a few nanoseconds per decision, which is why it is off until
// called; package metrics calls it. Calling it again does nothing.
func (n *Node) ObserveDecisions() { n.obs.on.Store(true) }

// start is the time a decision starts if it is to be timed (about one in
// LatencySampleEvery), else the zero Time.
func (o *observer) start() time.Time {
	if rand.Uint32()%LatencySampleEvery == 0 {
		return time.Now()
	}
	return time.Time{}
}

// observe counts one call of AllowN that returned d and err; start is its
// start if it is timed (else the zero Time). AllowN and AllowAll call it on
// every return past their input checks.
func (n *Node) observe(ctx context.Context, start time.Time, d *ringlimit.Decision, err *error) {
	if *err != nil || int(d.Source) >= len(n.obs.counts) {
		return
	}
	r := ResultAllowed
	if !d.Allowed {
		r = ResultDenied
		if ringlimit.IsShadow(ctx) {
			r = ResultShadowDenied
		}
	}
	n.obs.counts[d.Source][r].Add(1)
	if !start.IsZero() {
		lat := &n.obs.lat[d.Source]
		took := time.Since(start)
		i := 0
		for i < len(latencyBounds) && took > latencyBounds[i] {
			i++
		}
		lat.buckets[i].Add(1)
		lat.sum.Add(uint64(took))
	}
}

// DecisionStats returns the decisions counted since the node started (the
// latency sample: since ObserveDecisions).
func (n *Node) DecisionStats() DecisionStats {
	var s DecisionStats
	for src := range s.Counts {
		for r := range s.Counts[src] {
			s.Counts[src][r] = n.obs.counts[src][r].Load()
		}
		lat, out := &n.obs.lat[src], &s.Latency[src]
		// Read one after the other: under load Sum and Buckets may differ
		// by the decisions timed in between.
		out.Sum = time.Duration(lat.sum.Load())
		for i := range out.Buckets {
			out.Buckets[i] = lat.buckets[i].Load()
			out.Count += out.Buckets[i]
		}
	}
	return s
}

// WriteBehindQueue is the number of states waiting in the write-behind
// queue after its last write (0 without a store).
func (n *Node) WriteBehindQueue() int { return int(n.obs.queue.Load()) }
