package netchaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// quotaChildEnv marks the test binary that TestRollingRestartHalfCPU runs
// inside its cgroup.
const quotaChildEnv = "RINGLIMIT_NETCHAOS_QUOTA_CHILD"

// A rolling restart at half a CPU: four nodes in one process, a store and
// 16 callers, all in one cgroup with a quota of 50 ms per 100 ms, while each
// node in turn closes and a fresh one of the same name joins. The clock is
// frozen and the window an hour, so each of the 60 keys admits its limit
// once in all. Slow is not dead: nothing is admitted over, and no caller
// sees an error.
//
// Before the ownership core (internal/hold), measured under -race on a
// 2-core host at load 20: 38 of 60 keys over, 1,466 admitted over a total
// limit of 24,000, 34 of those keys with no store or fail-open admission.
// With it, same conditions: 23,999 of 24,000, 0 over, 0 store, 0 fallback.
//
// The test runs itself again inside the cgroup (the store it starts is a
// child of that process, so it runs under the quota too) and reports what
// that run said.
func TestRollingRestartHalfCPU(t *testing.T) {
	if os.Getenv(quotaChildEnv) != "" {
		rollingRestartUnderQuota(t)
		return
	}
	q := newCPUQuota(t, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := q.command(ctx, os.Args[0], "-test.run=^TestRollingRestartHalfCPU$", "-test.v", "-test.count=1", "-test.timeout=7m")
	cmd.Env = append(os.Environ(), quotaChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("the cgroup was %s; the run in it said:\n%s", q.throttled(), tail(string(out), 60))
	if err != nil {
		t.Errorf("the run in the cgroup failed: %v", err)
	}
}

func rollingRestartUnderQuota(t *testing.T) {
	srv := valkeytest.Start(t)
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, 4, func(cfg *node.Config) {
		cfg.Clock = clk
		cfg.ValkeyAddrs = []string{srv.Addr()}
	})
	const limit = 400
	algs := []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket, ringlimit.FixedWindow, ringlimit.SlidingLog, ringlimit.SlidingWindow}
	var keys []string
	var rules []ringlimit.Rule
	for i := range 60 {
		a := algs[i%len(algs)]
		keys = append(keys, fmt.Sprintf("%s:%d", a, i))
		rules = append(rules, ringlimit.Rule{Algorithm: a, Limit: limit, Window: time.Hour})
	}
	l := startQuotaLoad(t, c.Nodes, keys, rules, 16)
	l.waitFor(t, "a third of the capacity used", func() bool { return l.admittedTotal() >= int64(len(keys))*limit/3 })
	for i := range c.Nodes {
		l.without(c.Nodes[i])
		nd := c.Restart(t, i)
		l.with(nd)
		from := l.sentTotal()
		l.waitFor(t, "2000 more calls", func() bool { return l.sentTotal() >= from+2000 })
	}
	l.waitFor(t, "every key sent more than its limit", func() bool {
		for k := range keys {
			if l.sent[k].Load() <= limit+20 {
				return false
			}
		}
		return true
	})
	l.stopAll()
	var admitted, over, overNoStore int64
	for k := range keys {
		got := l.admitted[k].Load()
		admitted += got
		if got > limit {
			over += got - limit
			if l.byStore[k].Load() == 0 {
				overNoStore++
			}
			t.Errorf("%s: %d admitted, limit %d (%d by the store or fail-open)", keys[k], got, limit, l.byStore[k].Load())
		}
	}
	if overNoStore > 0 {
		t.Logf("%d keys went over with no admission by the store or fail-open: their state was decided in two places by the nodes alone (the hand-off, issue 26)", overNoStore)
	}
	t.Logf("admitted %d of a total limit %d (%d over) in %d calls; sources local %d, peer %d, store %d, fallback %d",
		admitted, int64(len(keys))*limit, over, l.sentTotal(),
		l.sources[ringlimit.Local].Load(), l.sources[ringlimit.Peer].Load(), l.sources[ringlimit.Store].Load(), l.sources[ringlimit.Fallback].Load())
	for _, nd := range c.Nodes {
		s := nd.Stats()
		t.Logf("%s: lag %s, forwards %d (failed %d), handed off %d, received %d, pulls %d, hand-off failures %d",
			nd.Name(), s.Lag, s.Forwards, s.ForwardFailures, s.HandedOff, s.Received, s.Pulls, s.HandoffFailures)
	}
	if n := l.errs.Load(); n > 0 {
		t.Errorf("%d caller errors", n)
	}
}

// quotaLoad is the rolling restart's callers: each sends one call after
// another to a random live node on a random key.
type quotaLoad struct {
	mu       sync.RWMutex
	nodes    []*node.Node
	sent     []atomic.Int64
	admitted []atomic.Int64
	sources  [4]atomic.Int64
	byStore  []atomic.Int64 // admissions by the store or fail-open, per key
	errs     atomic.Int64
	stop     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

func startQuotaLoad(t *testing.T, nodes []*node.Node, keys []string, rules []ringlimit.Rule, workers int) *quotaLoad {
	l := &quotaLoad{nodes: slices.Clone(nodes), sent: make([]atomic.Int64, len(keys)),
		admitted: make([]atomic.Int64, len(keys)), byStore: make([]atomic.Int64, len(keys)), stop: make(chan struct{})}
	t.Cleanup(l.stopAll)
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 27))
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				k := r.IntN(len(keys))
				l.mu.RLock() // a node is closed only with no call on it
				nd := l.nodes[r.IntN(len(l.nodes))]
				d, err := nd.Allow(context.Background(), keys[k], rules[k])
				l.mu.RUnlock()
				l.sent[k].Add(1)
				if err != nil {
					if l.errs.Add(1) <= 5 {
						t.Errorf("%s: %s: %v", nd.Name(), keys[k], err)
					}
					continue
				}
				l.sources[d.Source].Add(1)
				if d.Allowed {
					l.admitted[k].Add(1)
					if d.Source == ringlimit.Store || d.Source == ringlimit.Fallback {
						l.byStore[k].Add(1)
					}
				}
			}
		}()
	}
	return l
}

func (l *quotaLoad) without(nd *node.Node) {
	l.mu.Lock()
	l.nodes = slices.DeleteFunc(l.nodes, func(x *node.Node) bool { return x == nd })
	l.mu.Unlock()
}

func (l *quotaLoad) with(nd *node.Node) {
	l.mu.Lock()
	l.nodes = append(l.nodes, nd)
	l.mu.Unlock()
}

func (l *quotaLoad) sentTotal() (n int64) {
	for i := range l.sent {
		n += l.sent[i].Load()
	}
	return n
}

func (l *quotaLoad) admittedTotal() (n int64) {
	for i := range l.admitted {
		n += l.admitted[i].Load()
	}
	return n
}

// stopAll stops the callers and waits for them; it may be called again.
func (l *quotaLoad) stopAll() {
	l.once.Do(func() { close(l.stop); l.wg.Wait() })
}

// quotaWait bounds each wait of the rolling restart: measured, the whole
// run takes 10 s at half a CPU, 47 s under -race on a loaded 2-core host
// with no quota.
const quotaWait = 2 * time.Minute

// waitFor polls cond every 10 ms for up to quotaWait (a cluster at half a
// CPU under -race is slow), failing the test if it never holds.
func (l *quotaLoad) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(quotaWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", quotaWait, what)
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}
