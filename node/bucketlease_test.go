package node_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// A hot token-bucket key far below its limit leases (before, its holder
// declined every ask: the bucket could refill to full within a lease's
// life) and is never denied while leases are granted, renewed and given
// back: the holder's own bucket holds what is lent fewer (internal/
// memstore's floor), at most a hundredth of the capacity a borrower, and
// the key's callers spend far less than the rest. On the system clock, so
// that the bucket refills as it would in use.
func TestHotBucketUnderItsLimitIsNeverDenied(t *testing.T) {
	c := nodetest.Start(t, 5, func(cfg *node.Config) {
		cfg.ForwardTimeout = 5 * time.Second // (two cores under -race: no call goes to the policy)
		cfg.LeaseHot = 8
	})
	waitFor(t, 10*time.Second, "every node leasing", func() bool {
		for _, nd := range c.Nodes {
			if !node.Leasing(nd) {
				return false
			}
		}
		return true
	})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1_000_000_000, Window: time.Minute}
	const key = "hot-bucket"
	var denied, admitted atomic.Int64
	var sources [4]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, nd := range c.Nodes {
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
					d, err := nd.Allow(ctx, key, rule)
					if err != nil {
						t.Errorf("%s: %v", nd.Name(), err)
						return
					}
					sources[d.Source].Add(1)
					if d.Allowed {
						admitted.Add(1)
					} else {
						denied.Add(1)
					}
				}
			}()
		}
	}
	// Leases come and go: several granted, some given back with hits left
	// (a lease replaced by the next one, or expired), calls decided from
	// them.
	var st node.LeaseStats
	sum := func() node.LeaseStats {
		var s node.LeaseStats
		for _, nd := range c.Nodes {
			x := nd.Stats().Leases
			s.Granted += x.Granted
			s.Returned += x.Returned
			s.Decisions += x.Decisions
			s.Declined += x.Declined
			s.Expired += x.Expired
		}
		return s
	}
	deadline := time.Now().Add(30 * time.Second)
	for st = sum(); st.Granted < 8 || st.Returned < 2 || st.Decisions == 0; st = sum() {
		if time.Now().After(deadline) || denied.Load() > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("admitted %d, denied %d; decisions local %d, peer %d, store %d, fallback %d; leases granted %d, given back %d, expired %d, declined %d, calls decided from leases %d",
		admitted.Load(), denied.Load(), sources[ringlimit.Local].Load(), sources[ringlimit.Peer].Load(), sources[ringlimit.Store].Load(), sources[ringlimit.Fallback].Load(),
		st.Granted, st.Returned, st.Expired, st.Declined, st.Decisions)
	if denied.Load() != 0 {
		t.Fatalf("%d calls denied on a key far below its limit", denied.Load())
	}
	if st.Granted < 8 || st.Returned < 2 || st.Decisions == 0 {
		t.Fatalf("in 30 s: %d leases granted, %d given back, %d calls decided from them: want leases that come and go (8 granted, 2 back, calls decided)", st.Granted, st.Returned, st.Decisions)
	}
}
