package node_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// frozenCluster starts n nodes on one frozen clock (a key admits its
// capacity once: no refill, no new window), with forward ceilings of 5 s
// (two cores under -race: no call goes to the policy), and waits until
// every node may lease. (A node grants none in its first second; on a fast
// machine the callers that were to make a key hot spent its 20,000 hits in
// that second, and no lease ever came.)
func frozenCluster(t *testing.T, n int, opts ...func(*node.Config)) *nodetest.Cluster {
	clk := testclock.New(time.Now())
	c := nodetest.Start(t, n, func(cfg *node.Config) {
		traced(t, cfg)
		cfg.Clock = clk
		cfg.ForwardTimeout = 5 * time.Second
		for _, o := range opts {
			o(cfg)
		}
	})
	waitFor(t, 10*time.Second, "every node leasing", func() bool {
		for _, nd := range c.Nodes {
			if !node.Leasing(nd) {
				return false
			}
		}
		return true
	})
	return c
}

// settledGossip is the gossip preset of the tests that start from a
// settled ring (nodetest's WaitSettled) and are not about the failure
// detector: GossipLAN, the default. Beside eight busy loops and a second
// test process, GossipFast declares live members failed, and they come
// back within a second. Each drop and return is two ring changes after the
// ring had converged; the member that was dropped says no Done for them
// (its own view never changed), and the others, each holding an unresolved
// change, wait for its Done and for each other's: they report Changing
// until HandoffWindow (10 s) after the return. So WaitSettled's 10 s ran
// out: TestSlowRecallDeniesInTime failed 2 of 60 runs, n1 and n3 Changing
// and n2 not, every node seeing all three; in a trace n2 had been dropped
// by both and was back 0.4 s later. Without a false drop no view changes
// once WaitMembers has returned, so Changing ends within HandoffWindow of
// the last change, by WaitSettled's deadline.
const settledGossip = node.GossipLAN

// hitUntilDenied calls key from per goroutines on each of nodes until each
// is denied, and returns the hits admitted and the decisions by source. The
// goroutines on the key's owner start once some other node holds a lease
// and has decided a call from it (warm), so that the owner's own callers,
// which decide in memory far faster than the others forward, do not spend
// the key first.
func hitUntilDenied(t *testing.T, nodes []*node.Node, per int, key string, rule ringlimit.Rule, warm bool) (int64, [4]int64) {
	t.Helper()
	var admitted atomic.Int64
	var sources [4]atomic.Int64
	var wg sync.WaitGroup
	call := func(nd *node.Node) {
		defer wg.Done()
		for {
			d, err := nd.Allow(ctx, key, rule)
			if err != nil {
				t.Errorf("%s: %v", nd.Name(), err)
				return
			}
			sources[d.Source].Add(1)
			if !d.Allowed {
				return
			}
			admitted.Add(1)
		}
	}
	owner := nodes[0].Owner(key)
	var later []*node.Node
	for _, nd := range nodes {
		if warm && nd.Name() == owner {
			later = append(later, nd)
			continue
		}
		for range per {
			wg.Add(1)
			go call(nd)
		}
	}
	if warm {
		// A call decided from a lease, counted once: one held lasts
		// moments while sixteen callers spend it, and a poll descheduled on
		// a busy machine can miss every one of them. (Waiting for a lease
		// granted was not enough: under -race beside busy loops, the
		// owner's callers then spent the key before any borrower used the
		// leases it held.)
		leased := func() bool {
			for _, nd := range nodes {
				if nd.Stats().Leases.Decisions > 0 {
					return true
				}
			}
			return false
		}
		for deadline := time.Now().Add(20 * time.Second); !leased(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				for _, nd := range nodes {
					st := nd.Stats()
					t.Logf("%s: leases %+v; ring changes open %d, changing %v", nd.Name(), st.Leases, st.Sources, st.Changing)
				}
				t.Fatalf("no call decided from a lease of %s in 20 s; %d admitted meanwhile", key, admitted.Load())
			}
		}
	}
	for _, nd := range later {
		for range per {
			wg.Add(1)
			go call(nd)
		}
	}
	wg.Wait()
	var s [4]int64
	for i := range s {
		s[i] = sources[i].Load()
	}
	return admitted.Load(), s
}

// One key hit from every node of five until every caller is denied: the
// non-owners lease it and decide from their leases, and the key admits its
// capacity, never more. The clock is frozen, so that the key admits its
// capacity once (no refill, no new window).
//
// A denial recalls the leases out first, but waits for them only so long
// (recallBy): on a starved machine the callers can stop while leases still
// hold hits, at most a hundredth of the capacity a borrower. Those come
// back as the leases expire or are recalled, and the owner then admits
// them: what the callers were admitted and what is left once every lease
// is back make the capacity. (That a recall brings a lease's hits back
// before the denial is TestExpiredUnsweptLeaseComesBack's and
// TestLateRecallAnswerLosesNothing's to show; a forwarded denial's is
// TestForwardedDenialWaitsForItsRecall's.) (A bound on the first part alone,
// 1 %, failed beside four busy loops under -race before and after the
// recall's deadline: 49,484 and 49,000.)
//
// The token bucket runs twice: refilling its capacity in an hour, and in a
// second (on the frozen clock it refills nothing either way). The second
// leased nothing before the floor (internal/memstore's floor.go): it could
// refill to full within a lease's life, so its holder declined every ask.
func TestHotKeyLeasesAdmitTheLimit(t *testing.T) {
	const limit = 50_000
	for _, tc := range []struct {
		name string
		rule ringlimit.Rule
	}{
		{"token_bucket", ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: limit, Window: time.Hour}},
		{"token_bucket_per_second", ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: limit, Window: time.Second}},
		{"fixed_window", ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: limit, Window: time.Hour}},
		{"sliding_window", ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: limit, Window: time.Hour}},
	} {
		alg := tc.name
		t.Run(alg, func(t *testing.T) {
			// Hot at 8 forwards a second, not 32: on a starved machine four
			// callers a node may forward fewer than 32 a second, and the
			// test is of what leases admit, not of when a key is hot.
			// The LAN gossip timings, as in TestExactAcrossTheCluster: with
			// the fast preset, twenty callers under -race beside busy loops
			// starve the probes, members are declared dead and come back,
			// and the key changes holder mid-test with no store to carry
			// it. Leases out then strand (their holder's state left), and
			// forwards in flight are decided twice: runs lost 82 and 523
			// hits that way, and one granted no lease in 20 s. That is the
			// ring's subject, not this test's.
			c := frozenCluster(t, 5, func(cfg *node.Config) {
				cfg.LeaseHot = 8
				cfg.Gossip = node.GossipLAN
			})
			rule := tc.rule
			key := fmt.Sprintf("hot-%s", alg)
			got, sources := hitUntilDenied(t, c.Nodes, 4, key, rule, true)
			var granted, decided, recalls uint64
			for _, nd := range c.Nodes {
				s := nd.Stats().Leases
				granted += s.Granted
				decided += s.Decisions
				recalls += s.Recalls
			}
			t.Logf("%s: admitted %d of %d; decisions local %d, peer %d, store %d, fallback %d; leases granted %d, recalls %d, calls decided from leases %d",
				alg, got, limit, sources[ringlimit.Local], sources[ringlimit.Peer], sources[ringlimit.Store], sources[ringlimit.Fallback], granted, recalls, decided)
			if sources[ringlimit.Store]+sources[ringlimit.Fallback] != 0 {
				logForwarding(t, c.Nodes)
				t.Fatalf("%d calls went to the store tier", sources[ringlimit.Store]+sources[ringlimit.Fallback])
			}
			if got > limit {
				t.Fatalf("admitted %d, over the capacity of %d", got, limit)
			}
			if granted == 0 || decided == 0 {
				t.Fatalf("no lease granted (%d) or used (%d): the test did not exercise leases", granted, decided)
			}
			owner := c.Nodes[0]
			for _, nd := range c.Nodes {
				if nd.Name() == nd.Owner(key) {
					owner = nd
				}
			}
			waitFor(t, 20*time.Second, "every lease back", func() bool {
				for _, nd := range c.Nodes {
					if s := nd.Stats().Leases; s.Held != 0 || s.Lent != 0 {
						return false
					}
				}
				return true
			})
			rest, _ := hitUntilDenied(t, []*node.Node{owner}, 1, key, rule, false)
			// A forward whose connection a false death closed (gossip on a
			// starved host) may have been decided by the owner before it
			// went down the chain again: decided twice, admitted once (one
			// such run admitted 49,996: every lease accounted for, and the
			// connections of two borrowers to the owner closed under
			// calls). Each counts a redirect.
			var redirects uint64
			for _, nd := range c.Nodes {
				redirects += nd.Stats().Redirects
			}
			t.Logf("%d more once every lease was back; %d redirects", rest, redirects)
			if missing := limit - got - rest; missing < 0 || uint64(missing) > redirects {
				logForwarding(t, c.Nodes)
				t.Fatalf("admitted %d, and %d once every lease was back: want the capacity, %d, less at most the calls that went down the chain again (%d)", got, rest, limit, redirects)
			}
			if borrowers := int64(len(c.Nodes) - 1); rest > borrowers*limit/100 {
				t.Fatalf("%d were left when the callers stopped: want at most a hundredth of the capacity a borrower (%d)", rest, borrowers*limit/100)
			}
		})
	}
}

// logForwarding logs what each node's forwards met: for a test that saw
// calls go to the store tier.
func logForwarding(t *testing.T, nodes []*node.Node) {
	for _, nd := range nodes {
		st := nd.Stats()
		t.Logf("%s: forwards %d, failures %d, reroutes %d, redirects %d, served %d; breakers %v; timeouts %v; lag %v; changing %v; leases %+v",
			nd.Name(), st.Forwards, st.ForwardFailures, st.Reroutes, st.Redirects, st.Served, st.Peers, st.PeerTimeouts, st.Lag, st.Changing, st.Leases)
	}
}

// callUntilLeased calls key from one caller on borrower until it holds a
// lease (which then has nearly all of it left), and returns the hits
// admitted meanwhile.
func callUntilLeased(t *testing.T, borrower *node.Node, key string, rule ringlimit.Rule) int64 {
	t.Helper()
	var before int64
	for deadline := time.Now().Add(20 * time.Second); borrower.Stats().Leases.Held == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no lease within 20 s")
		}
		if d, err := borrower.Allow(ctx, key, rule); err == nil && d.Allowed {
			before++
		}
	}
	return before
}

// heatUntilLeased calls key from the nodes until one of them holds a lease
// of it, and returns the hits admitted meanwhile.
func heatUntilLeased(t *testing.T, nodes []*node.Node, key string, rule ringlimit.Rule) int64 {
	t.Helper()
	var admitted atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, nd := range nodes {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if d, err := nd.Allow(ctx, key, rule); err == nil && d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	waitFor(t, 20*time.Second, "a lease held", func() bool {
		for _, nd := range nodes {
			if nd.Stats().Leases.Held > 0 {
				return true
			}
		}
		return false
	})
	close(stop)
	wg.Wait()
	// An ask made before the stop may still be on its way: its lease would
	// arrive after whatever the test does next. Wait until none is.
	waitFor(t, 10*time.Second, "the lease asks answered", func() bool {
		for _, nd := range nodes {
			if node.LeaseAsks(nd) != 0 {
				return false
			}
		}
		return true
	})
	return admitted.Load()
}

// Reset revokes a key's leases: after it the key admits its capacity and no
// more, though a borrower held a lease of it.
func TestResetRevokesLeases(t *testing.T) {
	c := frozenCluster(t, 3)
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 20_000, Window: time.Hour}
	const key = "reset-hot"
	owner := c.Nodes[0].Owner(key)
	var borrowers []*node.Node
	for _, nd := range c.Nodes {
		if nd.Name() != owner {
			borrowers = append(borrowers, nd)
		}
	}
	heatUntilLeased(t, borrowers, key, rule)
	if err := borrowers[0].Reset(ctx, key); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.Nodes {
		if s := nd.Stats().Leases; s.Held != 0 {
			t.Fatalf("%s holds %d leases after the Reset", nd.Name(), s.Held)
		}
	}
	got, _ := hitUntilDenied(t, c.Nodes, 2, key, rule, false)
	if got > 20_000 || got < 20_000-20_000/100 {
		t.Fatalf("admitted %d after the Reset, want its capacity of 20,000 (at most 1%% less)", got)
	}
}

// A lease that expired at its borrower before the borrower gave back what
// it had left (its sweep is late: a descheduled node, or here a sweep that
// never comes) still comes back when the holder would deny: the holder
// recalls every grant that may still come back, not only the unexpired
// ones, and the key admits exactly its capacity. (Beside four busy loops
// TestHotKeyLeasesAdmitTheLimit admitted 49,494 of 50,000: the holder
// denied once the grants had expired, every caller stopped, and the
// borrowers' hits came back after.)
func TestExpiredUnsweptLeaseComesBack(t *testing.T) {
	c := frozenCluster(t, 2, func(cfg *node.Config) {
		cfg.WriteBehind = time.Hour // the sweep of expired leases never runs
	})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 20_000, Window: time.Hour}
	const key = "expired-hot"
	var owner, borrower *node.Node
	for _, nd := range c.Nodes {
		if nd.Name() == nd.Owner(key) {
			owner = nd
		} else {
			borrower = nd
		}
	}
	before := callUntilLeased(t, borrower, key, rule)
	_, _, left, _ := node.HeldLease(borrower, key)
	waitFor(t, 10*time.Second, "the grant expired at the holder", func() bool {
		return node.LentOut(owner, key, rule) == 0
	})
	after, _ := hitUntilDenied(t, []*node.Node{owner}, 1, key, rule, false)
	t.Logf("admitted %d while leasing and %d after; the borrower's expired lease had %d left", before, after, left)
	if left == 0 {
		t.Fatal("the borrower's lease had nothing left: the test does not reach the case")
	}
	if got := before + after; got != 20_000 {
		t.Fatalf("admitted %d, want exactly the capacity of 20,000", got)
	}
}

// A borrower that crashes strands its lease: the key admits its capacity
// less at most that lease (a hundredth of it), never more.
func TestCrashedBorrowerStrandsItsLease(t *testing.T) {
	c := frozenCluster(t, 3)
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 20_000, Window: time.Hour}
	const key = "crash-hot"
	owner := c.Nodes[0].Owner(key)
	var victim, others []*node.Node
	for _, nd := range c.Nodes {
		if nd.Name() != owner && victim == nil {
			victim = append(victim, nd)
		} else {
			others = append(others, nd)
		}
	}
	before := heatUntilLeased(t, victim, key, rule)
	node.Crash(victim[0])
	c.WaitMembers(t, 10*time.Second, others...)
	after, _ := hitUntilDenied(t, others, 2, key, rule, false)
	got := before + after
	t.Logf("admitted %d before the crash and %d after: %d of 20,000", before, after, got)
	if got > 20_000 || got < 20_000-20_000/100 {
		t.Fatalf("admitted %d, want 20,000 less at most its crashed borrower's lease (200)", got)
	}
}

// A recall whose answer comes later than the owner waits for it loses
// nothing: the borrower gives what it had left back on a message of its
// own too, and the key admits exactly its capacity. (Found by
// TestExactAcrossTheCluster under load: 995 of 1,000, a recall that timed
// out having taken the borrower's 5 with it.)
func TestLateRecallAnswerLosesNothing(t *testing.T) {
	c := frozenCluster(t, 2)
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 20_000, Window: time.Hour}
	const key = "recall-late"
	var owner, borrower *node.Node
	for _, nd := range c.Nodes {
		if nd.Name() == c.Nodes[0].Owner(key) {
			owner = nd
		} else {
			borrower = nd
		}
	}
	// The borrower answers the owner's recall only once the owner has
	// given up on it (a recall waits a second) and denied: the answer of a
	// peer that is slow.
	var leftAt atomic.Int64
	leftAt.Store(-1)
	release := make(chan struct{})
	node.OnRecallAnswered(borrower, func(left int64) {
		leftAt.Store(left)
		<-release
	})
	before := callUntilLeased(t, borrower, key, rule)
	after, _ := hitUntilDenied(t, []*node.Node{owner}, 1, key, rule, false)
	close(release)
	st := owner.Stats().Leases
	t.Logf("admitted %d while leasing and %d at the owner; the owner's leases: %+v", before, after, st)
	if st.Recalls == 0 || leftAt.Load() <= 0 {
		t.Fatalf("recalls %d, the borrower had %d left: the test did not exercise a recall of what was left", st.Recalls, leftAt.Load())
	}
	if got := before + after; got != 20_000 {
		t.Fatalf("admitted %d, want the capacity, 20,000", got)
	}
}

// A holder's grants are told apart from those of its earlier incarnation
// and from other borrowers' grants: a give-back that comes late from a
// lease the holder gave before it restarted, or that names a grant made to
// another member, returns nothing to the key. (A restarted holder numbered
// its grants from 1 again, and took a give-back by its id alone: the late
// give-back of an old lease voided the new one's grant and put its hits
// back while the borrower still spent them.)
func TestStaleGiveBackReturnsNothing(t *testing.T) {
	c := frozenCluster(t, 3)
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 20_000, Window: time.Hour}
	const key = "stale-give-back"
	holder := 0
	for i, nd := range c.Nodes {
		if nd.Name() == c.Nodes[0].Owner(key) {
			holder = i
		}
	}
	borrower, other := c.Nodes[(holder+1)%3], c.Nodes[(holder+2)%3]
	admitted := heatUntilLeased(t, []*node.Node{borrower}, key, rule)
	from, lastOld, _, ok := node.HeldLease(borrower, key)
	if !ok || from != c.Nodes[holder].Name() {
		t.Fatalf("the borrower holds no lease of the holder's (%q, %v)", from, ok)
	}
	granted := c.Nodes[holder].Stats().Leases.Granted // every grant the first incarnation made, all to the borrower
	c.Restart(t, holder)
	waitFor(t, 20*time.Second, "the old lease gone", func() bool { return borrower.Stats().Leases.Held == 0 })
	admitted += heatUntilLeased(t, []*node.Node{borrower}, key, rule)
	from, id, left, ok := node.HeldLease(borrower, key)
	if !ok || from != c.Nodes[holder].Name() {
		t.Fatalf("the borrower holds no lease of the restarted holder's (%q, %v)", from, ok)
	}
	// Every grant of the first incarnation, given back late, as if nothing
	// had been spent of it; and the live grant, given back by a member it
	// was not made to.
	for old := lastOld - granted + 1; old <= lastOld; old++ {
		node.GiveBack(borrower, key, rule, from, old, rule.Capacity()/100)
	}
	node.GiveBack(other, key, rule, from, id, left)
	got, _ := hitUntilDenied(t, c.Nodes, 2, key, rule, false)
	admitted += got
	t.Logf("admitted %d of 20,000 (%d grants before the restart; the borrower's lease then %d, now %d)", admitted, granted, lastOld, id)
	if admitted > 20_000 {
		t.Fatalf("admitted %d, over the capacity of 20,000", admitted)
	}
}

// TestDeclinedAsksBackOff: a hot key whose holder declines every ask (a
// token bucket of 100 tokens, too small to lease: a lease holds at most a
// hundredth of the capacity and at least 4) asks after twice the wait each
// time, up to 250 ms, not every 20 ms: over 1.5 s of forwards at full
// speed, at most the doublings, one ask every 250 ms and one a second
// period (before, one ask every 20 ms of it: about 75, each a round trip
// beside the forwards). A leaky bucket, which never leases, asks nothing.
func TestDeclinedAsksBackOff(t *testing.T) {
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.ForwardTimeout = 5 * time.Second
		cfg.Gossip = settledGossip
	})
	a, o := c.Nodes[0], c.Nodes[1]
	c.WaitSettled(t, 10*time.Second)
	keys := keysOwnedBy(a, o.Name(), 2)
	key := keys[0]
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1 << 40, Burst: 100, Window: time.Second}
	start := time.Now()
	forwards := 0
	for time.Since(start) < 1500*time.Millisecond {
		d, err := a.Allow(ctx, key, rule)
		if err != nil || !d.Allowed || d.Source != ringlimit.Peer {
			t.Fatalf("forward %d: %+v, %v", forwards, d, err)
		}
		forwards++
	}
	elapsed := time.Since(start)
	// Every ask made has been answered (or given up on) once none is on
	// its way; declines then match.
	var st node.LeaseStats
	waitFor(t, 10*time.Second, "the asks answered", func() bool {
		st = a.Stats().Leases
		return node.LeaseAsks(a) == 0
	})
	periods := int(elapsed/time.Second) + 2
	t.Logf("%d forwards in %v: %d asks, %d declined", forwards, elapsed, st.Asked, st.Declined)
	if st.Asked < 2 || st.Declined != st.Asked || st.Held != 0 {
		t.Fatalf("asked %d, declined %d, held %d: want every ask declined, at least 2", st.Asked, st.Declined, st.Held)
	}
	if bound := uint64(5 + int(elapsed/(250*time.Millisecond)) + periods); st.Asked > bound {
		t.Fatalf("%d asks in %v, each declined: want at most %d (backing off to one every 250 ms)", st.Asked, elapsed, bound)
	}
	leaky := ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 1 << 40, Window: time.Second}
	for range 1000 {
		if d, err := a.Allow(ctx, keys[1], leaky); err != nil || !d.Allowed || d.Source != ringlimit.Peer {
			t.Fatalf("a leaky bucket's forward: %+v, %v", d, err)
		}
	}
	waitFor(t, 10*time.Second, "the asks answered", func() bool { return node.LeaseAsks(a) == 0 })
	if asked := a.Stats().Leases.Asked; asked != st.Asked {
		t.Fatalf("a leaky bucket's forwards asked for %d leases: it never leases", asked-st.Asked)
	}
}

// leasedTrio is three nodes on a frozen clock, with a key that the first
// (owner) holds and the second (borrower) holds a lease of; the third
// (caller) leases nothing, so that its calls of the key are forwarded. It
// returns the hits admitted while the borrower leased, and its lease.
type leasedTrio struct {
	c                       *nodetest.Cluster
	owner, borrower, caller *node.Node
	key                     string
	rule                    ringlimit.Rule
	admitted, lease         int64
}

func startLeasedTrio(t *testing.T, limit int64, opts ...func(*node.Config)) *leasedTrio {
	c := frozenCluster(t, 3, append(opts, func(cfg *node.Config) {
		cfg.Gossip = settledGossip
		cfg.LeaseHot = 8
		if cfg.Name == "n3" {
			cfg.LeaseHot = -1 // the caller leases nothing: every call of its is forwarded
		}
	})...)
	c.WaitSettled(t, 10*time.Second)
	lt := &leasedTrio{c: c, owner: c.Nodes[0], borrower: c.Nodes[1], caller: c.Nodes[2],
		rule: ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: limit, Window: time.Hour}}
	lt.key = keysOwnedBy(lt.caller, lt.owner.Name(), 1)[0]
	lt.admitted = callUntilLeased(t, lt.borrower, lt.key, lt.rule)
	_, _, lt.lease, _ = node.HeldLease(lt.borrower, lt.key)
	return lt
}

// spendAllBut has the owner spend what is left of the key's state but
// keep, in one call, and counts it admitted.
func (lt *leasedTrio) spendAllBut(t *testing.T, keep int64) {
	d, err := lt.owner.Peek(ctx, lt.key, lt.rule)
	if err != nil || d.Remaining <= keep {
		t.Fatalf("the owner's peek: %+v, %v", d, err)
	}
	if d, err := lt.owner.AllowN(ctx, lt.key, lt.rule, d.Remaining-keep); err != nil || !d.Allowed {
		t.Fatalf("the owner's call: %+v, %v", d, err)
	}
	lt.admitted += d.Remaining - keep
}

// A recall slower than a forwarded call may wait for its holder does not
// send the call to the store tier: the holder waits for the recall at most
// a third of the forward timeout, as for a pull (the caller waits half of
// it at least), on a worker, never on the connection's reader (where the
// denials of eight callers would wait in turn), and then its denial
// stands; what the leases had left comes back for the calls after. Here the borrower cannot be reached, and its
// lease is not swept, so the recall would wait until the grant expires, a
// second. (In CI, TestHotKeyLeasesAdmitTheLimit admitted 50,012 of 50,000:
// twelve forwarded denials that waited on recalls longer than their callers
// waited for them went to the policy, which admitted them.)
func TestSlowRecallDeniesInTime(t *testing.T) {
	const limit = 4000
	lt := startLeasedTrio(t, limit, func(cfg *node.Config) {
		cfg.ForwardTimeout = time.Second
		cfg.WriteBehind = time.Hour // no sweep: the lease is not given back as it expires
	})
	owner, caller, lease := lt.owner, lt.caller, lt.lease
	lt.c.Network.Drop(owner.Name(), lt.borrower.Name()) // the recall cannot reach the borrower
	// The owner spends all but two of what is left in one call, so that
	// the caller's denial comes moments after the grant, while the grant
	// has most of its second to live (the recall would wait that long).
	lt.spendAllBut(t, 2)
	// Eight callers on one connection to the owner: denials that each
	// waited for their recall on the connection's reader, in turn, kept
	// the later ones waiting past their callers' timeouts.
	after, sources := hitUntilDenied(t, []*node.Node{caller}, 8, lt.key, lt.rule, false)
	admitted := lt.admitted + after
	st := owner.Stats()
	t.Logf("admitted %d of %d (the borrower's lease %d); decisions peer %d, store %d, fallback %d; the owner's recalls %d; the caller's forward failures %d",
		admitted, limit, lease, sources[ringlimit.Peer], sources[ringlimit.Store], sources[ringlimit.Fallback], st.Leases.Recalls, caller.Stats().ForwardFailures)
	if st.Leases.Recalls == 0 || lease == 0 {
		t.Fatalf("recalls %d, lease %d: the test did not recall a lease", st.Leases.Recalls, lease)
	}
	if n := sources[ringlimit.Store] + sources[ringlimit.Fallback]; n != 0 {
		t.Fatalf("%d calls went to the store tier", n)
	}
	if admitted > limit || admitted < limit-lease {
		t.Fatalf("admitted %d, want %d less at most the unreachable borrower's lease (%d)", admitted, limit, lease)
	}
}

// Denials that come faster than a borrower answers a recall wait for the
// recall on its way rather than send more: here 32 callers on the holder
// are denied while the one borrower's answers take seconds (and its
// give-back cannot reach the holder), and one recall message goes out, not
// one a denial. (Each recall message holds a goroutine until it is
// answered or times out: a second, for a borrower that is gone.)
func TestRecallsDoNotPileUp(t *testing.T) {
	c := frozenCluster(t, 2, func(cfg *node.Config) {
		cfg.ForwardTimeout = time.Second
		cfg.WriteBehind = time.Hour // no sweep: the lease is not given back as it expires
		cfg.LeaseHot = 8
		cfg.Gossip = settledGossip
	})
	owner, borrower := c.Nodes[0], c.Nodes[1]
	c.WaitSettled(t, 10*time.Second)
	key := keysOwnedBy(borrower, owner.Name(), 1)[0]
	const limit = 4000
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: limit, Window: time.Hour}
	admitted := callUntilLeased(t, borrower, key, rule)
	_, _, lease, _ := node.HeldLease(borrower, key)
	// The owner's calls to the borrower get no answer before they give up
	// (a new connection, dialled with 5 s of delay on what the owner reads),
	// and nothing the borrower sends reaches the owner.
	c.Network.Delay(owner.Name(), borrower.Name(), 5*time.Second)
	c.Network.Drop(owner.Name(), borrower.Name())
	c.Network.Restore(owner.Name(), borrower.Name())
	c.Network.Drop(borrower.Name(), owner.Name())
	before := node.RecallsSent(owner)
	after, _ := hitUntilDenied(t, []*node.Node{owner}, 32, key, rule, false)
	admitted += after
	sent := node.RecallsSent(owner) - before
	t.Logf("admitted %d of %d (the borrower's lease %d); %d recall messages for 32 denials, %d recalls",
		admitted, limit, lease, sent, owner.Stats().Leases.Recalls)
	if lease == 0 || sent == 0 {
		t.Fatalf("lease %d, recall messages %d: the test did not recall a lease", lease, sent)
	}
	if sent > 2 {
		t.Fatalf("%d recall messages of the one grant while one was on its way: want 1 (2 if a denial came after it timed out)", sent)
	}
	if admitted > limit || admitted < limit-lease {
		t.Fatalf("admitted %d, want %d less at most the borrower's lease (%d)", admitted, limit, lease)
	}
}

// A forwarded call that its key's holder would deny while a lease of the
// key is out gets the lease's hits: the holder recalls the lease, and the
// call (asked again, on a worker of the connection) is decided once they
// are back. The key admits exactly its capacity, every hit of the caller's
// decided by the holder.
func TestForwardedDenialWaitsForItsRecall(t *testing.T) {
	const limit = 4000
	lt := startLeasedTrio(t, limit)
	lease := lt.lease
	lt.spendAllBut(t, 0) // the state is spent: what is left is in the lease
	after, sources := hitUntilDenied(t, []*node.Node{lt.caller}, 1, lt.key, lt.rule, false)
	admitted := lt.admitted + after
	t.Logf("the caller was admitted %d after the state was spent (the borrower's lease %d); %d of %d in all; decisions peer %d, store %d, fallback %d",
		after, lease, admitted, limit, sources[ringlimit.Peer], sources[ringlimit.Store], sources[ringlimit.Fallback])
	if lease == 0 || after == 0 {
		t.Fatalf("lease %d, admitted after %d: the recall brought nothing back to the forwarded call", lease, after)
	}
	if n := sources[ringlimit.Store] + sources[ringlimit.Fallback]; n != 0 {
		t.Fatalf("%d calls went to the store tier", n)
	}
	if admitted != limit {
		t.Fatalf("admitted %d, want exactly the capacity, %d", admitted, limit)
	}
}
