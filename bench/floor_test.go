package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
)

// The forwarding floor (issue 31, item 1): ringlimit's forwarded decisions
// beside the two echo floors, in one process and one run.
//
// Why the comparison is fair:
//   - Same process, same run, interleaved: each round measures the floor and
//     then ringlimit, three rounds, and the ratios are taken within a round,
//     so the load of this shared machine weighs on both alike.
//   - Same transport: Go's net package on 127.0.0.1, TCP_NODELAY (Go's
//     default, as for the peer link), one connection. The callers, the echo
//     server and all three nodes live in this process, as the two ends of
//     every link do.
//   - Same callers: one caller doing sequential calls, and 32 callers at
//     once; ringlimit's keys are all owned by one peer, so its calls share
//     one connection, as the floor's do.
//   - The floors are what no forwarding can beat, not straw men: the first
//     has no goroutine hand-off at all (the caller writes and reads its own
//     32-byte frame); the second has the shape the issue names (one writer
//     goroutine flushing whatever is queued, never waiting on a timer, one
//     reader dispatching answers by id). The echo does no work: the owner's
//     decision (a few hundred ns) and the sealed record's larger size (key,
//     rule, GCM tag) are part of what ringlimit pays over the floor.
//   - Every counted ringlimit call was forwarded and answered by its owner
//     (Source Peer); any other answer fails the benchmark.
//   - Connections are dialled and warmed before any round.

const (
	floorFrame   = 32 // bytes a floor frame: an id and a payload
	floorCallers = 32
	floorRounds  = 3
)

var floorRule = ringlimit.Rule{Limit: 1 << 40, Window: time.Second}

// peerAnswered is nil if a call was decided by the owning peer.
func peerAnswered(d ringlimit.Decision, err error) error {
	if err != nil {
		return fmt.Errorf("forwarded call: %w", err)
	}
	if d.Source != ringlimit.Peer {
		return fmt.Errorf("forwarded call decided by source %d, not Peer (%d)", d.Source, ringlimit.Peer)
	}
	return nil
}

// seqRinglimit makes calls sequential forwarded decisions on n and returns
// their latencies; any call not answered by a peer is an error.
func seqRinglimit(n *node.Node, keys []string, calls int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, calls)
	ctx := context.Background()
	for i := range calls {
		start := time.Now()
		d, err := n.Allow(ctx, keys[i%len(keys)], floorRule)
		lat = append(lat, time.Since(start))
		if err := peerAnswered(d, err); err != nil {
			return nil, err
		}
	}
	return lat, nil
}

// muxRinglimit makes calls forwarded decisions from floorCallers goroutines
// on n and returns the decisions per second.
func muxRinglimit(n *node.Node, keys []string, calls int) (float64, error) {
	var next atomic.Int64
	var bad atomic.Pointer[error]
	var wg sync.WaitGroup
	ctx := context.Background()
	start := time.Now()
	for g := range floorCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(calls); i = next.Add(1) {
				d, err := n.Allow(ctx, keys[(int(i)+g*127)%len(keys)], floorRule)
				if err := peerAnswered(d, err); err != nil {
					e := err // on the heap only when it fails
					bad.CompareAndSwap(nil, &e)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := bad.Load(); p != nil {
		return 0, *p
	}
	return float64(calls) / time.Since(start).Seconds(), nil
}

// startSealed starts a 3-node cluster with a secret (sealed peer links) on
// loopback, with the gossip timings as deployed, and waits until every node
// sees all three and is past its hand-off window. The nodes close when the
// test ends.
func startSealed(tb testing.TB) []*node.Node {
	var nodes []*node.Node
	var join []string
	for i := range 3 {
		n, err := node.New(node.Config{
			Name:           fmt.Sprintf("f%d", i+1),
			GossipAddr:     "127.0.0.1:0",
			RPCAddr:        "127.0.0.1:0",
			Join:           join,
			SecretKey:      forwardSecret,
			Gossip:         node.GossipLAN,
			ForwardTimeout: time.Second, // a loaded machine's stall is not the link's cost
			HandoffWindow:  50 * time.Millisecond,
			LeaseHot:       -1, // forwarding is measured: a hot token bucket would lease now
		})
		if err != nil {
			tb.Fatalf("start node %d: %v", i+1, err)
		}
		tb.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
		join = append(join, n.GossipAddr())
	}
	for _, n := range nodes {
		if err := settle(n, len(nodes)); err != nil {
			tb.Fatal(err)
		}
	}
	return nodes
}

// keysOf returns count keys that from sees owned by owner.
func keysOf(from *node.Node, owner string, count int) []string {
	var keys []string
	for i := 0; len(keys) < count; i++ {
		if k := "fk" + strconv.Itoa(i); from.Owner(k) == owner {
			keys = append(keys, k)
		}
	}
	return keys
}

func p50(lat []time.Duration) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkForwardFloor is issue 31's item 1: ringlimit's forwarded
// decisions through a 3-node sealed cluster beside the echo floors, in
// floorRounds interleaved rounds of four: the sequential floor, ringlimit
// with 1 caller, the multiplexed floor, ringlimit with 32 callers. It
// logs each round's figures and the median of the rounds' ratios: p50 for
// 1 caller (ringlimit ÷ floor: above 1 is slower), decisions per second for
// 32 callers (ringlimit ÷ floor: below 1 is slower).
//
//	cd bench && go test -run X -bench ForwardFloor
//
// The table goes to stdout: the testing package shows a parent benchmark's
// b.Log only with -v.
func BenchmarkForwardFloor(b *testing.B) {
	nodes := startSealed(b)
	caller := nodes[0]
	keys := keysOf(caller, nodes[1].Name(), 1024) // one peer: one connection, as the floors'
	echo := startEcho(b)
	seqConn := echo.dial(b)
	defer seqConn.Close()
	mux := newMuxClient(echo.dial(b))
	defer mux.close()

	// Warm-up: the peer connection dialled and sealed, its buffers and
	// workers grown; the floors' connections used.
	if _, err := seqRinglimit(caller, keys, 2000); err != nil {
		b.Fatal(err)
	}
	if _, err := muxRinglimit(caller, keys, 20000); err != nil {
		b.Fatal(err)
	}
	if _, err := seqFloor(seqConn, 2000); err != nil {
		b.Fatal(err)
	}
	if _, err := muxFloor(mux, 20000); err != nil {
		b.Fatal(err)
	}

	// Each sub-benchmark keeps the figure of its last (largest) run.
	var floor1, ring1 [floorRounds]time.Duration
	var floor32, ring32 [floorRounds]float64
	seq := func(p *time.Duration, run func(int) ([]time.Duration, error)) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			lat, err := run(b.N)
			if err != nil {
				b.Fatal(err)
			}
			*p = p50(lat)
			b.ReportMetric(float64(p.Nanoseconds())/1e3, "p50-µs")
		}
	}
	par := func(p *float64, run func(int) (float64, error)) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			rate, err := run(b.N)
			if err != nil {
				b.Fatal(err)
			}
			*p = rate
			b.ReportMetric(rate, "calls/s")
		}
	}
	for r := range floorRounds {
		b.Run(fmt.Sprintf("1caller/floor/round%d", r+1), seq(&floor1[r], func(n int) ([]time.Duration, error) { return seqFloor(seqConn, n) }))
		b.Run(fmt.Sprintf("1caller/ringlimit/round%d", r+1), seq(&ring1[r], func(n int) ([]time.Duration, error) { return seqRinglimit(caller, keys, n) }))
		b.Run(fmt.Sprintf("32callers/floor/round%d", r+1), par(&floor32[r], func(n int) (float64, error) { return muxFloor(mux, n) }))
		b.Run(fmt.Sprintf("32callers/ringlimit/round%d", r+1), par(&ring32[r], func(n int) (float64, error) { return muxRinglimit(caller, keys, n) }))
	}

	var r1, r32 []float64
	report := "| round | 1 caller p50: floor | ringlimit | ratio | 32 callers: floor | ringlimit | ratio |\n|---|---|---|---|---|---|---|\n"
	for r := range floorRounds {
		if floor1[r] == 0 || ring1[r] == 0 || floor32[r] == 0 || ring32[r] == 0 {
			return // a -bench filter left part of the round out: no ratios
		}
		a, c := float64(ring1[r])/float64(floor1[r]), ring32[r]/floor32[r]
		r1, r32 = append(r1, a), append(r32, c)
		report += fmt.Sprintf("| %d | %.1f µs | %.1f µs | %.2f× | %.0fk/s | %.0fk/s | %.2f× |\n",
			r+1, float64(floor1[r].Nanoseconds())/1e3, float64(ring1[r].Nanoseconds())/1e3, a, floor32[r]/1e3, ring32[r]/1e3, c)
	}
	fmt.Printf("%smedian ratios of %d interleaved rounds: 1 caller p50 %.2f× the sequential floor; 32 callers %.2f× the multiplexed floor's throughput\n",
		report, floorRounds, median(r1), median(r32))
}
