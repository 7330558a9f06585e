package node_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
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

// load sends hits for its keys to the nodes in its pool from many
// goroutines until finish, and counts what each key admitted.
type load struct {
	t     *testing.T
	keys  []string
	rules []ringlimit.Rule // by key

	mu    sync.RWMutex // held for reading by each call, for writing to change the pool
	nodes []*node.Node

	admitted, sent []atomic.Int64 // by key
	failOpen       []atomic.Int64 // by key: admitted by the fail-open policy (Source Fallback)
	byMu           sync.Mutex
	by             []map[string]int // by key: admitted, by node called and source
	sources        [4]atomic.Int64
	errs           atomic.Int64
	stop           chan struct{}
	stopOnce       sync.Once
	wg             sync.WaitGroup
}

// startLoad starts workers goroutines; each waits pace between calls if
// pace is not zero.
func startLoad(t *testing.T, nodes []*node.Node, keys []string, rules []ringlimit.Rule, workers int, pace ...time.Duration) *load {
	l := &load{t: t, keys: keys, rules: rules, nodes: slices.Clone(nodes),
		admitted: make([]atomic.Int64, len(keys)), sent: make([]atomic.Int64, len(keys)), failOpen: make([]atomic.Int64, len(keys)), stop: make(chan struct{}),
		by: make([]map[string]int, len(keys))}
	for k := range l.by {
		l.by[k] = map[string]int{}
	}
	// A test that fails before finish must not leave its callers spinning
	// on closed nodes: they starved every later test of the package (beside
	// eight busy loops, one failure became a 30-minute timeout).
	t.Cleanup(l.finish)
	for g := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 11))
			var tick <-chan time.Time
			if len(pace) > 0 {
				tk := time.NewTicker(pace[0])
				defer tk.Stop()
				tick = tk.C
			}
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				if tick != nil {
					select {
					case <-l.stop:
						return
					case <-tick:
					}
				}
				k := r.IntN(len(keys))
				l.mu.RLock()
				nd := l.nodes[r.IntN(len(l.nodes))]
				d, err := nd.Allow(ctx, keys[k], rules[k])
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
					if d.Source == ringlimit.Fallback {
						l.failOpen[k].Add(1)
					}
					l.byMu.Lock()
					l.by[k][nd.Name()+"/"+d.Source.String()]++
					l.byMu.Unlock()
				}
			}
		}()
	}
	return l
}

// without takes nd out of the pool: no call is on it when it returns.
func (l *load) without(nd *node.Node) {
	l.mu.Lock()
	l.nodes = slices.DeleteFunc(l.nodes, func(x *node.Node) bool { return x == nd })
	l.mu.Unlock()
}

func (l *load) with(nd *node.Node) {
	l.mu.Lock()
	l.nodes = append(l.nodes, nd)
	l.mu.Unlock()
}

func (l *load) totalSent() int64 {
	var s int64
	for i := range l.sent {
		s += l.sent[i].Load()
	}
	return s
}

func (l *load) totalAdmitted() int64 {
	var s int64
	for i := range l.admitted {
		s += l.admitted[i].Load()
	}
	return s
}

// moreCalls waits until n more calls were made.
func (l *load) moreCalls(n int64) {
	l.t.Helper()
	from := l.totalSent()
	waitFor(l.t, 20*time.Second, fmt.Sprintf("%d more calls", n), func() bool { return l.totalSent() >= from+n })
}

func (l *load) finish() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// check fails the test for any key admitted beyond its limit, except
// through the fail-open policy's decisions on that key (counted and
// printed: an overloaded host's forward that outlived its timeout, with no
// store), and for any caller error. It returns the total admitted and the
// total limit.
func (l *load) check() (admitted, limit int64) {
	l.t.Helper()
	over, failOpen, overByPolicy := 0, int64(0), 0
	for k := range l.keys {
		got, lim, fo := l.admitted[k].Load(), l.rules[k].Limit, l.failOpen[k].Load()
		admitted += got
		limit += lim
		failOpen += fo
		if got > lim && got <= lim+fo {
			overByPolicy++
			l.t.Logf("%s (%s): %d admitted, limit %d, of them %d by the fail-open policy", l.keys[k], l.rules[k].Algorithm, got, lim, fo)
		}
		if got > lim+fo {
			if over++; over <= 10 {
				l.byMu.Lock()
				l.t.Errorf("%s (%s): %d admitted, limit %d, %d by the fail-open policy (by node called and source: %v)", l.keys[k], l.rules[k].Algorithm, got, lim, fo, l.by[k])
				l.byMu.Unlock()
			}
		}
	}
	if over > 0 {
		l.t.Errorf("%d of %d keys over-admitted beyond their fail-open decisions", over, len(l.keys))
	}
	l.t.Logf("fail-open decisions that admitted: %d, on %d keys over their limit through them alone", failOpen, overByPolicy)
	if n := l.errs.Load(); n != 0 {
		l.t.Errorf("%d caller errors", n)
	}
	return admitted, limit
}

// handoffKeys are keys of every algorithm, a Limit of limit per hour each.
func handoffKeys(perAlg int, limit int64) ([]string, []ringlimit.Rule) {
	var keys []string
	var rules []ringlimit.Rule
	for _, alg := range allAlgorithms {
		for i := range perAlg {
			keys = append(keys, fmt.Sprintf("%s:%d", alg, i))
			rules = append(rules, ringlimit.Rule{Algorithm: alg, Limit: limit, Window: time.Hour})
		}
	}
	return keys, rules
}

func logHandoffStats(t *testing.T, nodes []*node.Node) {
	for _, nd := range nodes {
		s := nd.Stats()
		t.Logf("%s: handed off %d, received %d, pulls %d, redirects %d, hand-off failures %d, writes %d, loads %d",
			nd.Name(), s.HandedOff, s.Received, s.Pulls, s.Redirects, s.HandoffFailures, s.Writes, s.Loads)
	}
}

// loadGossip sets the gossip of the tests of hand-offs under load to
// GossipLAN, the default preset. Beside eight busy loops and the rest of
// this package, GossipFast's detector dropped live members (a view without
// a member that was never down), so keys could not settle where the rings
// put them within 20 s, and a holder declared dead while alive may add up
// to a key's capacity (docs/holder-authority.md: that design is not built
// yet). These tests are of hand-offs, not of the failure detector.
func loadGossip(cfg *node.Config) { cfg.Gossip = node.GossipLAN }

// Every node of a 4-node cluster is restarted in turn (Close, then a new
// node of the same name joins) while 16 goroutines send hits for 150 keys of
// every algorithm to the live nodes. The clock is frozen, so a key admits
// its Limit once in all: a key whose state were lost at a restart would
// admit it again. No key is admitted beyond its limit and no caller sees an
// error, with no store, and with the store down (the hand-off does not need
// it).
func TestRollingRestartUnderLoad(t *testing.T) {
	for _, storeDown := range []bool{false, true} {
		t.Run(fmt.Sprintf("storeDown=%v", storeDown), func(t *testing.T) {
			clk := testclock.New(time.Now())
			var addr string
			if storeDown {
				srv := valkeytest.Start(t)
				srv.Kill()
				addr = srv.Addr()
			}
			c := nodetest.Start(t, 4, func(cfg *node.Config) {
				traced(t, cfg)
				cfg.Clock = clk
				cfg.ForwardTimeout = 5 * time.Second // two cores under -race
				loadGossip(cfg)
				if addr != "" {
					cfg.ValkeyAddrs = []string{addr}
				}
			})
			const limit = 100
			keys, rules := handoffKeys(30, limit)
			l := startLoad(t, c.Nodes, keys, rules, 16)
			waitFor(t, 20*time.Second, "a third of the capacity used", func() bool {
				return l.totalAdmitted() >= int64(len(keys))*limit/3
			})
			for i := range c.Nodes {
				l.without(c.Nodes[i])
				nd := c.Restart(t, i)
				l.with(nd)
				l.moreCalls(2000)
			}
			waitFor(t, 20*time.Second, "every key sent more than its limit", func() bool {
				for k := range keys {
					if l.sent[k].Load() <= limit+20 {
						return false
					}
				}
				return true
			})
			l.finish()
			admitted, total := l.check()
			t.Logf("admitted %d of a total limit %d over %d calls (local %d, peer %d, store %d, fallback %d)",
				admitted, total, l.totalSent(), l.sources[0].Load(), l.sources[1].Load(), l.sources[2].Load(), l.sources[3].Load())
			logHandoffStats(t, c.Nodes)
			var received uint64
			for _, nd := range c.Nodes {
				received += nd.Stats().Received
			}
			if received == 0 {
				t.Error("no node received a state: the test did not exercise the hand-off")
			}
		})
	}
}

// A fourth node joins a 3-node cluster under load: the keys that move to
// it keep their state; none is admitted beyond its limit.
func TestScaleOutUnderLoad(t *testing.T) {
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, 3, func(cfg *node.Config) {
		traced(t, cfg)
		cfg.Clock = clk
		cfg.ForwardTimeout = 5 * time.Second
		loadGossip(cfg)
	})
	const limit = 100
	keys, rules := handoffKeys(30, limit)
	l := startLoad(t, c.Nodes, keys, rules, 16)
	waitFor(t, 20*time.Second, "half the capacity used", func() bool {
		return l.totalAdmitted() >= int64(len(keys))*limit/2
	})
	nd := c.Add(t)
	l.with(nd)
	waitFor(t, 20*time.Second, "every key sent more than its limit", func() bool {
		for k := range keys {
			if l.sent[k].Load() <= limit+20 {
				return false
			}
		}
		return true
	})
	l.moreCalls(2000)
	l.finish()
	admitted, total := l.check()
	t.Logf("admitted %d of a total limit %d over %d calls", admitted, total, l.totalSent())
	logHandoffStats(t, c.Nodes)
	moved := 0
	for _, k := range keys {
		if nd.Owner(k) == nd.Name() {
			moved++
		}
	}
	if s := nd.Stats(); moved == 0 || s.Received == 0 {
		t.Errorf("%d keys moved to the new node, it received %d states: the test did not exercise the hand-off", moved, s.Received)
	}
}

// An owner crashes under load with the store up. Its keys' states were
// written behind every 100 ms, so the peers that fall back to the store, and
// then the keys' new owners (which load the states once), continue from
// them: a key is over-admitted by at most the hits of about one
// write-behind interval, instead of by everything the dead owner admitted.
func TestOwnerCrashWriteBehindBoundsLoss(t *testing.T) {
	srv := valkeytest.Start(t)
	const interval = 100 * time.Millisecond
	c := nodetest.Start(t, 3, func(cfg *node.Config) {
		cfg.ValkeyAddrs = []string{srv.Addr()}
		cfg.WriteBehind = interval
		cfg.ForwardTimeout = time.Second
		cfg.StoreTimeout = time.Second
	})
	victim, a, b := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	const limit = 1000
	keys := keysOwnedBy(a, victim.Name(), 10)
	rules := make([]ringlimit.Rule, len(keys))
	for i := range rules {
		rules[i] = ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: limit, Window: time.Hour}
	}
	start := time.Now()
	l := startLoad(t, []*node.Node{a, b}, keys, rules, 8, time.Millisecond)
	waitFor(t, 10*time.Second, "the owner writing behind", func() bool { return victim.Stats().Writes > 0 })
	waitFor(t, 20*time.Second, "a quarter of the capacity used", func() bool {
		return l.totalAdmitted() >= int64(len(keys))*limit/4
	})
	// The rate per key per write-behind interval, just before the crash.
	a0, t0 := l.totalAdmitted(), time.Now()
	waitFor(t, 20*time.Second, "half the capacity used", func() bool {
		return l.totalAdmitted() >= int64(len(keys))*limit/2
	})
	perInterval := float64(l.totalAdmitted()-a0) / float64(len(keys)) / (float64(time.Since(t0)) / float64(interval))
	beforeCrash := l.totalAdmitted()
	// A starved owner writes behind late: its interval stretches by as
	// long as it is descheduled (Stats.Lag, the largest lateness of its own
	// timer lately), and the hits of that stretch are lost with it too.
	lag := victim.Stats().Lag
	node.Crash(victim)
	crashed := time.Now()
	c.WaitMembers(t, 10*time.Second, a, b)
	t.Logf("crash after %s; the ring dropped the dead owner %s later", crashed.Sub(start), time.Since(crashed))
	waitFor(t, 30*time.Second, "every key sent well over its limit", func() bool {
		for k := range keys {
			if l.sent[k].Load() <= 2*limit {
				return false
			}
		}
		return true
	})
	l.finish()
	var worst int64
	for k := range keys {
		worst = max(worst, l.admitted[k].Load()-limit)
	}
	t.Logf("hits per key per %s before the crash: %.0f; admitted before the crash %d per key; worst over-admission %d per key (limit %d); sources local %d peer %d store %d fallback %d",
		interval, perInterval, beforeCrash/int64(len(keys)), worst, limit,
		l.sources[0].Load(), l.sources[1].Load(), l.sources[2].Load(), l.sources[3].Load())
	logHandoffStats(t, []*node.Node{a, b})
	if n := l.errs.Load(); n != 0 {
		t.Errorf("%d caller errors", n)
	}
	// The dead owner's last interval (and the write in flight) is lost;
	// allow two intervals' worth, stretched by its lag, and some scheduling
	// slack, far below what it had admitted (half the limit). (Beside eight
	// busy loops: 63 per key lost at 9 hits per interval; the bound without
	// the lag was 27.)
	if bound := int64(perInterval*(2+float64(lag)/float64(interval))) + 10; worst > bound {
		t.Errorf("over-admitted by up to %d per key, more than two write-behind intervals' worth stretched by the owner's lag %s (%d)", worst, lag, bound)
	}
	t.Logf("the owner's lag before the crash: %s", lag)
	var loads uint64
	for _, nd := range []*node.Node{a, b} {
		loads += nd.Stats().Loads
	}
	if loads == 0 {
		t.Error("no new owner loaded a state from the store")
	}
}

// With the store down, the write-behind keeps at most WriteBehindQueue
// states and counts the ones it drops; decisions go on, locally, without
// an error and without allocating.
func TestWriteBehindStoreDownDropsOldest(t *testing.T) {
	srv := valkeytest.Start(t)
	srv.Kill()
	c := nodetest.Start(t, 1, func(cfg *node.Config) {
		cfg.ValkeyAddrs = []string{srv.Addr()}
		cfg.WriteBehind = 10 * time.Millisecond
		cfg.WriteBehindQueue = 100
		cfg.HandoffWindow = 10 * time.Millisecond
	})
	a := c.Nodes[0]
	waitFor(t, 5*time.Second, "the end of the hand-off window", func() bool { return !a.Stats().Changing })
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Hour}
	for i := range 1000 {
		d, err := a.Allow(ctx, fmt.Sprint("down", i), rule)
		if err != nil || !d.Allowed || d.Source != ringlimit.Local {
			t.Fatalf("call %d: %+v, %v", i, d, err)
		}
	}
	// The drops are counted when a tick drains the marks, before that
	// tick's write to the dead store fails: wait for both.
	waitFor(t, 10*time.Second, "900 drops and a failed write", func() bool {
		s := a.Stats()
		return s.WriteDrops >= 900 && s.WriteFailures > 0
	})
	s := a.Stats()
	if s.Writes != 0 || s.WriteFailures == 0 || s.WriteDrops != 900 {
		t.Fatalf("writes %d, failures %d, drops %d; want 0, some, 900", s.Writes, s.WriteFailures, s.WriteDrops)
	}
	hot := ringlimit.Rule{Limit: 1_000_000, Window: time.Hour}
	a.Allow(ctx, "hot", hot)
	if allocs := testing.AllocsPerRun(1000, func() { a.Allow(ctx, "hot", hot) }); allocs != 0 {
		t.Fatalf("%v allocs per owned-key decision with write-behind on", allocs)
	}
	// The store comes back: the queue drains.
	srv.Restart()
	waitFor(t, 10*time.Second, "the queued states written", func() bool { return a.Stats().Writes >= 100 })
}

// exhaust uses up key's limit at nd and checks that one more hit is denied.
func exhaust(t *testing.T, nd *node.Node, key string, rule ringlimit.Rule) {
	t.Helper()
	for i := range rule.Limit {
		if d, err := nd.Allow(ctx, key, rule); err != nil || !d.Allowed {
			t.Fatalf("%s hit %d: %+v, %v", key, i, d, err)
		}
	}
}

// denied checks that key, exhausted before an ownership change, is still
// denied after it, from every node.
func denied(t *testing.T, nodes []*node.Node, keys []string, rule ringlimit.Rule, what string) {
	t.Helper()
	for _, nd := range nodes {
		for _, k := range keys {
			d, err := nd.Allow(ctx, k, rule)
			if err != nil || d.Allowed {
				t.Fatalf("%s: %s at %s (owner %s): %+v, %v; want denied", what, k, nd.Name(), nd.Owner(k), d, err)
			}
		}
	}
}

// With no traffic while it happens, the keys of a node that leaves reach
// their next owners by its push alone (the hand-off window is short, so no
// pull covers for it), and stay exhausted.
func TestLeavePushesIdleKeys(t *testing.T) {
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, 3, func(cfg *node.Config) {
		cfg.Clock = clk
		cfg.HandoffWindow = 20 * time.Millisecond
	})
	leaver, a, b := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 5, Window: time.Hour}
	keys := keysOwnedBy(a, leaver.Name(), 20)
	for _, k := range keys {
		exhaust(t, a, k, rule)
	}
	if err := leaver.Close(); err != nil {
		t.Fatal(err)
	}
	c.WaitMembers(t, 10*time.Second, a, b)
	waitFor(t, 5*time.Second, "the end of the hand-off window", func() bool { return !a.Stats().Changing && !b.Stats().Changing })
	if s := leaver.Stats(); s.HandedOff != uint64(len(keys)) {
		t.Fatalf("handed off %d states, want %d", s.HandedOff, len(keys))
	}
	denied(t, []*node.Node{a, b}, keys, rule, "after the leave")
}

// With no traffic while it happens, the keys that move to a node that joins
// reach it by the old owners' pushes alone, and stay exhausted.
func TestJoinPushesIdleKeys(t *testing.T) {
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.Clock = clk
		cfg.HandoffWindow = 20 * time.Millisecond
	})
	a := c.Nodes[0]
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 5, Window: time.Hour}
	var keys []string
	for i := range 200 {
		keys = append(keys, fmt.Sprint("idle", i))
	}
	for _, k := range keys {
		exhaust(t, a, k, rule)
	}
	j := c.Add(t)
	var moved []string
	for _, k := range keys {
		if j.Owner(k) == j.Name() {
			moved = append(moved, k)
		}
	}
	if len(moved) == 0 {
		t.Fatal("no key moved to the new node")
	}
	waitFor(t, 5*time.Second, "the pushes and the end of the hand-off window", func() bool {
		for _, nd := range c.Nodes {
			if nd.Stats().Changing {
				return false
			}
		}
		return j.Stats().Received >= uint64(len(moved))
	})
	if s := j.Stats(); s.Pulls != 0 {
		t.Logf("the new node pulled %d states", s.Pulls)
	}
	denied(t, c.Nodes, moved, rule, "after the join")
}

var soak = flag.Bool("soak", false, "TestRollingRestartSoak: 20 restarts instead of 3")

// A rolling-restart soak: 4 nodes and a store, 16 goroutines of load on
// keys of every algorithm with a frozen clock (a key admits its Limit once
// in all), and one node after another restarted (a graceful Close, then a
// new node of the same name) 3 times, or 20 with -soak. Two holders of one
// key at once would admit its limit twice: no key may be over its limit,
// and no caller may see an error. It gossips as the other hand-off tests
// under load do (loadGossip): beside eight busy loops and another test
// process, GossipFast declared live members failed 22 times in its first
// 20 s (a trace), each drop and return two ring changes that moved keys
// and left every node Changing, and the load made 2,206 calls in those
// 20 s (with GossipLAN, in the same setting, the 5,000 admissions of a
// third of the capacity took a few seconds): 4 of 10 runs timed out
// waiting for progress, 3 of them before any restart.
func TestRollingRestartSoak(t *testing.T) {
	restarts := 3
	if *soak {
		restarts = 20
	}
	srv := valkeytest.Start(t)
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, 4, func(cfg *node.Config) {
		traced(t, cfg)
		cfg.Clock = clk
		cfg.ForwardTimeout = 5 * time.Second // two cores under -race
		cfg.ValkeyAddrs = []string{srv.Addr()}
		loadGossip(cfg)
	})
	const limit = 100
	keys, rules := handoffKeys(30, limit)
	l := startLoad(t, c.Nodes, keys, rules, 16)
	waitFor(t, 20*time.Second, "a third of the capacity used", func() bool {
		return l.totalAdmitted() >= int64(len(keys))*limit/3
	})
	for i := range restarts {
		j := i % len(c.Nodes)
		l.without(c.Nodes[j])
		nd := c.Restart(t, j)
		l.with(nd)
		l.moreCalls(1000)
	}
	l.finish()
	admitted, total := l.check()
	t.Logf("%d restarts: admitted %d of a total limit %d over %d calls (local %d, peer %d, store %d, fallback %d)",
		restarts, admitted, total, l.totalSent(), l.sources[0].Load(), l.sources[1].Load(), l.sources[2].Load(), l.sources[3].Load())
	logHandoffStats(t, c.Nodes)
}

// After joins and a leave, each key's state is held once, by its owner:
// the keys held across the cluster are the keys in use (issue 20: summed
// Local.Keys went from 100k to 126k after 3 joins when moved keys left
// marks in local behind). Pushes visit only the arcs a node lost: a key
// left behind where it was would show here.
func TestKeysHeldEqualLiveKeysAfterChanges(t *testing.T) {
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.Clock = clk
		cfg.ForwardTimeout = 5 * time.Second
		loadGossip(cfg)
	})
	const keys = 5000
	rule := ringlimit.Rule{Limit: 10, Window: time.Hour}
	for i := range keys {
		if _, err := c.Nodes[i%2].Allow(ctx, fmt.Sprint("live", i), rule); err != nil {
			t.Fatal(err)
		}
	}
	// Each node holds exactly the keys it owns (no copy lingers where a
	// key was, none is missing where it is), so the sum is the live keys.
	placed := func() bool {
		owned := map[string]int{}
		for i := range keys {
			owned[c.Nodes[0].Owner(fmt.Sprint("live", i))]++
		}
		sum := 0
		for _, nd := range c.Nodes {
			k := int(nd.Stats().Local.Keys)
			sum += k
			if k != owned[nd.Name()] {
				return false
			}
		}
		return sum == keys
	}
	settle := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !placed() {
			if time.Now().After(deadline) {
				owned := map[string]int{}
				for i := range keys {
					owned[c.Nodes[0].Owner(fmt.Sprint("live", i))]++
				}
				for _, nd := range c.Nodes {
					st := nd.Stats()
					t.Logf("%s: holds %d keys, owns %d; ring changes open %d, changing %v, marks %d, members %v",
						nd.Name(), st.Local.Keys, owned[nd.Name()], st.Sources, st.Changing, st.Marks, nd.Members())
				}
				t.Fatalf("timed out after 20s waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond) // polling, with a deadline
		}
	}
	settle("the keys held once at the start")
	for range 3 {
		c.Add(t)
		settle("the keys held once after a join")
	}
	c.Nodes[1].Close()
	c.Nodes = slices.Delete(c.Nodes, 1, 2)
	c.WaitMembers(t, 10*time.Second, c.Nodes...)
	settle("the keys held once after a leave")
	// And each by its owner: a call on every key is still its second hit.
	for i := range keys {
		d, err := c.Nodes[i%len(c.Nodes)].Allow(ctx, fmt.Sprint("live", i), rule)
		if err != nil || d.Remaining != rule.Limit-2 {
			t.Fatalf("live%d: %+v, %v; want its second hit", i, d, err)
		}
	}
}

// The report's sequence, with a store: n1 is cut off from n2 and decides n2's
// keys at the store; the link heals; 7 hits are spent on fresh keys of n2's
// through n1; then n2 closes. n2's push hands each key's state to n1, so the
// survivor admits what is left of the limit and no more: the report saw 27
// of 20 on every key, for all five algorithms (n1 restarted them from zero).
func TestPartitionHealThenLeave(t *testing.T) {
	srv := valkeytest.Start(t)
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		traced(t, cfg)
		cfg.Clock = clk
		cfg.ValkeyAddrs = []string{srv.Addr()}
		cfg.ForwardTimeout = 200 * time.Millisecond
	})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	const limit = 20
	rule := func(alg ringlimit.Algorithm) ringlimit.Rule {
		return ringlimit.Rule{Algorithm: alg, Limit: limit, Window: time.Hour}
	}
	cutKeys := keysOwnedBy(n1, n2.Name(), len(allAlgorithms))
	c.Network.Drop(n1.Name(), n2.Name())
	waitFor(t, 10*time.Second, "n1 deciding n2's keys at the store", func() bool {
		d, err := n1.Peek(ctx, "probe-"+cutKeys[0], rule(ringlimit.FixedWindow))
		return err == nil && d.Source == ringlimit.Store
	})
	for i, alg := range allAlgorithms {
		if d, err := n1.Allow(ctx, cutKeys[i], rule(alg)); err != nil || d.Source != ringlimit.Store {
			t.Fatalf("%s during the cut: %+v, %v; want a store decision", alg, d, err)
		}
	}
	c.Network.Heal()
	waitFor(t, 10*time.Second, "n1 forwarding to n2 again", func() bool {
		d, err := n1.Peek(ctx, "probe-"+cutKeys[0], rule(ringlimit.FixedWindow))
		return err == nil && d.Source == ringlimit.Peer
	})
	fresh := keysOwnedBy(n1, n2.Name(), len(allAlgorithms)+1)[1:]
	for i, alg := range allAlgorithms {
		for range 7 {
			if d, err := n1.Allow(ctx, fresh[i], rule(alg)); err != nil || !d.Allowed || d.Source != ringlimit.Peer {
				t.Fatalf("%s before the leave: %+v, %v", alg, d, err)
			}
		}
	}
	if err := n2.Close(); err != nil {
		t.Fatal(err)
	}
	for i, alg := range allAlgorithms {
		admitted := 7
		for range 2 * limit {
			d, err := n1.Allow(ctx, fresh[i], rule(alg))
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != limit {
			t.Errorf("%s: %d admitted of a limit of %d, after n2 left", alg, admitted, limit)
		}
	}
}
