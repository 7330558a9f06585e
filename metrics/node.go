package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/node"
)

// Register registers n's series with reg (see the package documentation for
// the list) and starts counting n's decisions by result and timing a sample
// of them (node.Node.ObserveDecisions). The series are read from n when reg
// is gathered. Several nodes in one registry: register each through
// prometheus.WrapRegistererWith(prometheus.Labels{"node": name}, reg).
func Register(reg prometheus.Registerer, n *node.Node) error {
	if reg == nil || n == nil {
		return fmt.Errorf("metrics: register node: %w", ErrNil)
	}
	if err := reg.Register(newNodeCollector(n)); err != nil {
		return fmt.Errorf("metrics: register node: %w", err)
	}
	n.ObserveDecisions()
	return nil
}

// snapshot is what one scrape reads from a node, once.
type snapshot struct {
	node.Stats
	decisions node.DecisionStats
	members   []string
	queue     int
}

// family is a series family read from a snapshot: one series per entry of
// series, each with its label value (none if label is "").
type family struct {
	name, help string
	typ        prometheus.ValueType
	label      string
	series     []series
}

type series struct {
	value string // the label's value
	get   func(*snapshot) uint64
}

// one is a family of a single unlabelled series.
func one(name, help string, typ prometheus.ValueType, get func(*snapshot) uint64) family {
	return family{name: name, help: help, typ: typ, series: []series{{get: get}}}
}

func boolean(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// nodeFamilies are the node's series that read a field of its Stats.
// A counter that node.Stats gains is one line here.
var nodeFamilies = []family{
	one("ringlimit_forwards_total", "Calls forwarded to the owning peer.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Forwards }),
	one("ringlimit_forward_failures_total", "Forwarded calls that got no answer from the owner, or were not sent because its breaker was open, and went to the store.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.ForwardFailures }),
	one("ringlimit_owner_waits_ended_total", "Calls that, with OwnerWait, waited for a slow owner until their context ended: they returned its error and went to neither the store nor the policy.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.OwnerWaitsEnded }),
	one("ringlimit_redirects_total", "Calls sent on to a key's new holder while ownership changed.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Redirects }),
	one("ringlimit_served_total", "Calls this node decided for its peers, as their keys' owner.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Served }),
	one("ringlimit_store_breaker_opens_total", "Times the store's circuit breaker opened.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Store.Opens }),
	one("ringlimit_store_errors_total", "Store calls that failed with an error.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Store.PrimaryErrors }),
	one("ringlimit_store_bad_values_total", "Calls on a key whose stored value was not ours (another type, another application's string, corrupt bytes): answered by the policy, not counted against the breaker.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Store.BadValues }),
	one("ringlimit_store_timeouts_total", "Store calls that took longer than the store timeout.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Store.Timeouts }),
	{name: "ringlimit_fallback_decisions_total", help: "Decisions made by the fail-open policy because neither the owner nor the store could answer, by policy.",
		typ: prometheus.CounterValue, label: "policy", series: []series{
			{failover.Open.String(), func(s *snapshot) uint64 { return s.Store.FallbackOpen }},
			{failover.Closed.String(), func(s *snapshot) uint64 { return s.Store.FallbackClosed }},
			{failover.LocalShare.String(), func(s *snapshot) uint64 { return s.Store.FallbackLocalShare }},
		}},
	{name: "ringlimit_peer_conns", help: "Peer connections open on this node's listener: authenticated, or still in the handshake.",
		typ: prometheus.GaugeValue, label: "state", series: []series{
			{"authenticated", func(s *snapshot) uint64 { return uint64(max(s.Peer.Conns, 0)) }},
			{"handshake", func(s *snapshot) uint64 { return uint64(max(s.Peer.Handshakes, 0)) }},
		}},
	{name: "ringlimit_peer_refused_total", help: "Peer connections the listener closed: cap (over MaxPeerConns) and handshake (over the handshake cap) before reading anything; auth (failed or timed-out handshake).",
		typ: prometheus.CounterValue, label: "cause", series: []series{
			{"cap", func(s *snapshot) uint64 { return s.Peer.RefusedCap }},
			{"handshake", func(s *snapshot) uint64 { return s.Peer.RefusedHandshake }},
			{"auth", func(s *snapshot) uint64 { return s.Peer.RefusedAuth }},
		}},
	one("ringlimit_peer_rejected_frames_total", "Peer records that failed to open or parse (modified, replayed, dropped or reordered on the path, or a fault); each closed its connection.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Peer.RejectedFrames }),
	one("ringlimit_peer_bad_calls_total", "Forwarded calls that parsed but asked what no rule can (a peer of another release, or a fault); each was answered with an error and its connection kept.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Peer.BadCalls }),
	one("ringlimit_peer_body_timeouts_total", "Peer connections closed because a record stalled after its first byte.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Peer.BodyTimeouts }),
	one("ringlimit_peer_idle_closed_total", "Peer connections closed for idleness.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Peer.IdleClosed }),
	one("ringlimit_members", "Live members of the cluster as this node sees them, itself included.",
		prometheus.GaugeValue, func(s *snapshot) uint64 { return uint64(len(s.members)) }),
	one("ringlimit_keys", "Keys whose state this node holds: the keys it owns.",
		prometheus.GaugeValue, func(s *snapshot) uint64 { return uint64(s.Local.Keys) }),
	one("ringlimit_memory_bytes", "Memory the held keys take, as Config.MaxBytes counts it: key strings, states and sliding-log stamps.",
		prometheus.GaugeValue, func(s *snapshot) uint64 { return uint64(max(s.Local.Bytes, 0)) }),
	{name: "ringlimit_evictions_total", help: "Keys dropped to make room; live=\"true\": their state still mattered, so their limits restarted early.",
		typ: prometheus.CounterValue, label: "live", series: []series{
			{"true", func(s *snapshot) uint64 { return s.Local.EvictedLive }},
			{"false", func(s *snapshot) uint64 { return s.Local.Evicted - s.Local.EvictedLive }},
		}},
	one("ringlimit_evictions_denying_total", "Of the live keys evicted, those that were denying (their next hit would have been denied): evicted only when every key sampled was denying, their limits restarted early.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Local.EvictedDenying }),
	one("ringlimit_expirations_total", "Idle keys dropped because their state no longer mattered.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Local.Expired }),
	{name: "ringlimit_handoff_states_total", help: "Key states handed over while ownership changed: out, given to their new owners; in, installed from others.",
		typ: prometheus.CounterValue, label: "direction", series: []series{
			{"out", func(s *snapshot) uint64 { return s.HandedOff }},
			{"in", func(s *snapshot) uint64 { return s.Received }},
		}},
	one("ringlimit_handoff_pulls_total", "Key states this node asked a previous owner for.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Pulls }),
	one("ringlimit_handoff_failures_total", "Key states a hand-off push could not deliver.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.HandoffFailures }),
	one("ringlimit_handoff_in_progress", "1 while this node leaves or is within the hand-off window of a ring change, else 0.",
		prometheus.GaugeValue, func(s *snapshot) uint64 { return boolean(s.Changing) }),
	one("ringlimit_writebehind_writes_total", "Key states written behind to the store.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Writes }),
	one("ringlimit_writebehind_failures_total", "Pipelined write-behind writes that failed (their states stay queued).",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.WriteFailures }),
	one("ringlimit_writebehind_drops_total", "Key states dropped from the write-behind queue because it was full.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.WriteDrops }),
	one("ringlimit_writebehind_queue", "Key states waiting in the write-behind queue after its last write.",
		prometheus.GaugeValue, func(s *snapshot) uint64 { return uint64(s.queue) }),
	one("ringlimit_store_loads_total", "Key states looked up in the store on gaining ownership.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Loads }),
	one("ringlimit_store_load_failures_total", "Store lookups on gaining ownership that the store did not answer.",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.LoadFailures }),
	{name: "ringlimit_leases_total", help: "Hot keys' leases: granted, given by this node as a key's holder; returned, whose unused hits came back to it; expired, held by this node and run out of time.",
		typ: prometheus.CounterValue, label: "event", series: []series{
			{"granted", func(s *snapshot) uint64 { return s.Leases.Granted }},
			{"returned", func(s *snapshot) uint64 { return s.Leases.Returned }},
			{"expired", func(s *snapshot) uint64 { return s.Leases.Expired }},
		}},
	{name: "ringlimit_lease_asks_total", help: "Leases this node asked for of other members' hot keys: asked, and of those declined by the key's holder (a key far under its limit is declined, and asks less and less often, down to once a second).",
		typ: prometheus.CounterValue, label: "result", series: []series{
			{"asked", func(s *snapshot) uint64 { return s.Leases.Asked }},
			{"declined", func(s *snapshot) uint64 { return s.Leases.Declined }},
		}},
	one("ringlimit_lease_recalls_total", "Denials that recalled a key's leases first (their unused hits came back before the key denied).",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Leases.Recalls }),
	one("ringlimit_lease_decisions_total", "Calls this node decided from a lease of a key another member holds (counted as Source local in ringlimit_decisions_total).",
		prometheus.CounterValue, func(s *snapshot) uint64 { return s.Leases.Decisions }),
	{name: "ringlimit_leases", help: "Leases now: held, of other members' keys; lent, keys this node has lent leases of.",
		typ: prometheus.GaugeValue, label: "side", series: []series{
			{"held", func(s *snapshot) uint64 { return uint64(s.Leases.Held) }},
			{"lent", func(s *snapshot) uint64 { return uint64(s.Leases.Lent) }},
		}},
}

var resultNames = [...]string{node.ResultAllowed: "allowed", node.ResultDenied: "denied", node.ResultShadowDenied: "shadow_denied"}

// nodeCollector reads a node's counters at scrape time.
type nodeCollector struct {
	n          *node.Node
	fams       []*prometheus.Desc // one per nodeFamilies entry
	decisions  *prometheus.Desc
	latency    *prometheus.Desc
	peerState  *prometheus.Desc
	shardState *prometheus.Desc
	peerTO     *prometheus.Desc
	shardTO    *prometheus.Desc
	lag        *prometheus.Desc
	bounds     []float64 // the latency buckets' upper bounds, in seconds
}

func newNodeCollector(n *node.Node) *nodeCollector {
	c := &nodeCollector{
		n: n,
		decisions: prometheus.NewDesc("ringlimit_decisions_total",
			"Decisions returned to this node's callers, by the source that decided (local, peer, store, fallback) and result. Exact. "+
				"shadow_denied: denials for callers that do not enforce them (shadow rules).",
			[]string{"source", "result"}, nil),
		latency: prometheus.NewDesc("ringlimit_decision_duration_seconds",
			fmt.Sprintf("Time from a call to its decision, by source. Sampled: about 1 decision in %d is timed, so _count is about 1/%d of ringlimit_decisions_total.",
				node.LatencySampleEvery, node.LatencySampleEvery),
			[]string{"source"}, nil),
		shardState: prometheus.NewDesc("ringlimit_store_breaker_state",
			"State of the store's circuit breaker: 0 closed, 1 half-open, 2 open. On Valkey Cluster one per master (shard: its address); "+
				"shard=\"\" is the one breaker of a single server, or of keys whose master is not known yet.",
			[]string{"shard"}, nil),
		peerTO: prometheus.NewDesc("ringlimit_peer_timeout_seconds",
			"Effective timeout of a call forwarded to each peer now: the RTO of its latencies (SRTT + 4 RTTVAR), at least 50 ms or half of ForwardTimeout plus the scheduling lag, at most ForwardTimeout.",
			[]string{"peer"}, nil),
		shardTO: prometheus.NewDesc("ringlimit_store_timeout_seconds",
			"Effective timeout of a store call now, per shard as ringlimit_store_breaker_state: the RTO of its latencies, at least 50 ms plus the scheduling lag, at most StoreTimeout.",
			[]string{"shard"}, nil),
		lag: prometheus.NewDesc("ringlimit_sched_lag_seconds",
			"How long this node was descheduled at a stretch lately (a CPU quota, a busy host, a GC pause): the largest lateness of its own 10 ms timer over the last 5 s.",
			nil, nil),
		peerState: prometheus.NewDesc("ringlimit_peer_breaker_state",
			"State of the circuit breaker in front of each peer: 0 closed, 1 half-open, 2 open. A member with no connection yet reports 0.",
			[]string{"peer"}, nil),
	}
	for _, f := range nodeFamilies {
		var labels []string
		if f.label != "" {
			labels = []string{f.label}
		}
		c.fams = append(c.fams, prometheus.NewDesc(f.name, f.help, labels, nil))
	}
	for _, b := range node.LatencyBounds() {
		c.bounds = append(c.bounds, b.Seconds())
	}
	return c
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.fams {
		ch <- d
	}
	ch <- c.decisions
	ch <- c.latency
	ch <- c.peerState
	ch <- c.shardState
	ch <- c.peerTO
	ch <- c.shardTO
	ch <- c.lag
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	s := &snapshot{Stats: c.n.Stats(), decisions: c.n.DecisionStats(), members: c.n.Members(), queue: c.n.WriteBehindQueue()}
	for i, f := range nodeFamilies {
		for _, se := range f.series {
			var labels []string
			if f.label != "" {
				labels = []string{se.value}
			}
			ch <- prometheus.MustNewConstMetric(c.fams[i], f.typ, float64(se.get(s)), labels...)
		}
	}
	for src := range s.decisions.Counts {
		source := ringlimit.Source(src).String()
		for r, v := range s.decisions.Counts[src] {
			ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(v), source, resultNames[r])
		}
		ch <- c.histogram(s.decisions.Latency[src], source)
	}
	// Every member but this node (the zero State, closed, for one not
	// dialled yet), and any peer whose connection outlives its membership.
	for _, m := range s.members {
		if _, ok := s.Peers[m]; !ok && m != c.n.Name() {
			ch <- prometheus.MustNewConstMetric(c.peerState, prometheus.GaugeValue, float64(failover.StateClosed), m)
		}
	}
	for m, st := range s.Peers {
		ch <- prometheus.MustNewConstMetric(c.peerState, prometheus.GaugeValue, float64(st), m)
	}
	if len(s.Store.Shards) == 0 {
		ch <- prometheus.MustNewConstMetric(c.shardState, prometheus.GaugeValue, float64(s.Store.State), "")
	}
	for _, sh := range s.Store.Shards {
		ch <- prometheus.MustNewConstMetric(c.shardState, prometheus.GaugeValue, float64(sh.State), sh.Shard)
	}
	for m, d := range s.PeerTimeouts {
		ch <- prometheus.MustNewConstMetric(c.peerTO, prometheus.GaugeValue, d.Seconds(), m)
	}
	if len(s.Store.Shards) == 0 {
		ch <- prometheus.MustNewConstMetric(c.shardTO, prometheus.GaugeValue, s.Store.Timeout.Seconds(), "")
	}
	for _, sh := range s.Store.Shards {
		ch <- prometheus.MustNewConstMetric(c.shardTO, prometheus.GaugeValue, sh.Timeout.Seconds(), sh.Shard)
	}
	ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, s.Lag.Seconds())
}

func (c *nodeCollector) histogram(l node.DecisionLatency, source string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(c.bounds))
	var cum uint64
	for i, ub := range c.bounds {
		cum += l.Buckets[i]
		buckets[ub] = cum
	}
	return prometheus.MustNewConstHistogram(c.latency, l.Count, l.Sum.Seconds(), buckets, source)
}
