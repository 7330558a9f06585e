package node_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

var tenPerSecond = ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second}

// waitSequentially makes n sequential waits on key, a fresh key, and
// returns how long they took from the first, and their sources.
func waitSequentially(t *testing.T, w ringlimit.Waiter, key string, rule ringlimit.Rule, n int) (time.Duration, map[ringlimit.Source]int) {
	t.Helper()
	start := time.Now()
	sources := map[ringlimit.Source]int{}
	for i := range n {
		d, err := w.WaitN(context.Background(), key, rule, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("wait %d: %+v, %v", i, d, err)
		}
		sources[d.Source]++
	}
	return time.Since(start), sources
}

// A node paces sequential waits on a key it owns and on one a peer owns
// alike: 30 waits on 10/s take the 2.0 s that the 20 after the burst of 10
// need. Never less, counted from the first (the 30th hit needs 20 refills
// of the full bucket, and the holder reserves each hit's turn), but for the
// millisecond the holder's clock is read in; the upper
// bound allows the burst's calls and each of the 20 sleeps a late wake-up
// on a loaded 2-core machine under -race (up to about 80 ms each).
func TestWaitPacesOwnedAndForwarded(t *testing.T) {
	c := nodetest.Start(t, 2, nil)
	a, b := c.Nodes[0], c.Nodes[1]
	for _, k := range []struct {
		name, key string
		source    ringlimit.Source
	}{
		{"owned", keysOwnedBy(a, a.Name(), 1)[0], ringlimit.Local},
		{"forwarded", keysOwnedBy(a, b.Name(), 1)[0], ringlimit.Peer},
	} {
		t.Run(k.name, func(t *testing.T) {
			took, sources := waitSequentially(t, a, k.key, tenPerSecond, 30)
			t.Logf("30 waits on 10/s, %s: %s from the first; sources %v", k.name, took, sources)
			if took < 1999*time.Millisecond || took > 3600*time.Millisecond {
				t.Fatalf("30 waits on 10/s: %s from the first, want 2.0 s (at most 3.6 s on a loaded machine)", took)
			}
			if sources[k.source] != 30 {
				t.Fatalf("sources %v, want all 30 %v", sources, k.source)
			}
		})
	}
}

// A waiter whose context ends gives its reserved hits back to the holder
// that reserved them, across the peer link too; and a wait that would
// outlast the caller's deadline is refused at once, consuming nothing.
func TestWaitCancelAndDeadline(t *testing.T) {
	c := nodetest.Start(t, 2, nil)
	a, b := c.Nodes[0], c.Nodes[1]
	hourly := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1, Window: time.Hour}
	for _, k := range []struct{ name, key string }{
		{"owned", keysOwnedBy(a, a.Name(), 1)[0]},
		{"forwarded", keysOwnedBy(a, b.Name(), 1)[0]},
	} {
		t.Run(k.name, func(t *testing.T) {
			if d, err := a.Allow(ctx, k.key, hourly); err != nil || !d.Allowed {
				t.Fatalf("first hit: %+v, %v", d, err)
			}
			peek := func() time.Duration {
				d, err := a.Peek(ctx, k.key, hourly)
				if err != nil {
					t.Fatal(err)
				}
				return d.RetryAfter
			}
			spent := peek() // about an hour: the bucket refills its one token

			dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err := a.WaitN(dctx, k.key, hourly, 1)
			cancel()
			if !errors.Is(err, ringlimit.ErrWaitTooLong) {
				t.Fatalf("wait past the deadline: %v, want ErrWaitTooLong", err)
			}
			if got := peek(); got > spent {
				t.Fatalf("a refused wait consumed: RetryAfter %s, was %s", got, spent)
			}

			wctx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := a.WaitN(wctx, k.key, hourly, 1)
				done <- err
			}()
			waitFor(t, 10*time.Second, "the reservation", func() bool { return peek() > spent+30*time.Minute })
			stop()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled wait: %v", err)
			}
			waitFor(t, 10*time.Second, "the hits given back", func() bool { return peek() <= spent })
		})
	}
}

// Bad input is an error at once, before anything is asked.
func TestWaitBadInput(t *testing.T) {
	c := nodetest.Start(t, 1, nil)
	a := c.Nodes[0]
	for _, tc := range []struct {
		key  string
		rule ringlimit.Rule
		n    int64
		want error
	}{
		{"", tenPerSecond, 1, ringlimit.ErrInvalidKey},
		{"k", ringlimit.Rule{}, 1, ringlimit.ErrInvalidRule},
		{"k", tenPerSecond, 11, ringlimit.ErrInvalidHits},
		{"k", tenPerSecond, -1, ringlimit.ErrInvalidHits},
	} {
		if _, err := a.WaitN(ctx, tc.key, tc.rule, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("WaitN(%q, %+v, %d): %v, want %v", tc.key, tc.rule, tc.n, err, tc.want)
		}
	}
	if d, err := a.Peek(ctx, "k", tenPerSecond); err != nil || d.Remaining != 10 {
		t.Fatalf("after bad waits: %+v, %v; want nothing recorded", d, err)
	}
}

// The owner cannot be reached: the store tier waits (failover's
// reservation in the store), and the wait still paces the key.
func TestWaitOwnerUnreachableWaitsAtTheStore(t *testing.T) {
	srv := valkeytest.Start(t)
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.ValkeyAddrs = []string{srv.Addr()}
		cfg.ForwardTimeout = 200 * time.Millisecond
	})
	a, b := c.Nodes[0], c.Nodes[1]
	key := keysOwnedBy(a, b.Name(), 1)[0]
	c.Network.Drop(a.Name(), b.Name())
	waitFor(t, 10*time.Second, "a deciding b's keys at the store", func() bool {
		d, err := a.Peek(ctx, "probe-"+key, tenPerSecond)
		return err == nil && d.Source == ringlimit.Store
	})
	took, sources := waitSequentially(t, a, key, tenPerSecond, 15)
	t.Logf("15 waits on 10/s at the store: %s from the first; sources %v", took, sources)
	if took < 499*time.Millisecond || sources[ringlimit.Store] != 15 { // (whole ms: see TestWaitPacesOwnedAndForwarded)
		t.Fatalf("15 waits on 10/s: %s from the first, sources %v; want at least 0.5 s, all at the store", took, sources)
	}
}

// 5 nodes × 8 goroutines wait in a loop on one 100/s token bucket (burst
// 1): the fleet is held to the rule. The count admitted over the run never
// exceeds what the rule allows since its first hit (the holder reserves
// each turn: however late a waiter wakes, it was admitted once, in its
// turn); the rate is logged, and must at least reach half the limit. The
// waiters keep the holder's queue full as long as a waiter's round trip,
// reservation and wake-up take less than waiters ÷ rate: with 4 a node
// (200 ms), a busy run under -race once made 34.7/s, round trips of over
// half a second; 40 waiters leave 400 ms, which only a stall of the whole
// machine for most of the run would use up.
func TestWaitFleetRate(t *testing.T) {
	c := nodetest.Start(t, 5, nil)
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 100, Window: time.Second, Burst: 1}
	const key, run = "fleet", 2 * time.Second
	var admitted atomic.Int64
	// The span starts before the first call: the bucket can admit no
	// earlier. (It started at the first admission a waiter saw, which a
	// loaded machine can see tens of ms after the holder admitted it: 199
	// in a span of 1.966 s, "over the 198 the rule allows".)
	start := time.Now()
	wctx, stop := context.WithTimeout(ctx, run)
	defer stop()
	var wg sync.WaitGroup
	var errs atomic.Int64
	for _, nd := range c.Nodes {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					d, err := nd.WaitN(wctx, key, rule, 1)
					if err != nil {
						if wctx.Err() == nil && !errors.Is(err, ringlimit.ErrWaitTooLong) {
							errs.Add(1)
						}
						return
					}
					if d.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	span := time.Since(start)
	got := admitted.Load()
	allowed := rule.Burst + int64(span.Seconds()*float64(rule.Limit)) + 1
	t.Logf("%d admitted in %s from 40 waiters on 5 nodes: %.1f/s (rule 100/s)", got, span.Round(time.Millisecond), float64(got)/span.Seconds())
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d waiters got errors", n)
	}
	if got > allowed {
		t.Fatalf("%d admitted in %s, over the %d the rule allows", got, span, allowed)
	}
	if got < int64(run.Seconds()*50) {
		t.Fatalf("%d admitted in %s: under half the rule's rate", got, run)
	}
}
