package remote_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/remote"
)

// 30 sequential waits on 10/s take 2.0 s ± 10 % after the burst of 10, in
// one round trip each. Why it holds on a busy machine: the bucket in the
// store keeps the cadence, not the caller. A waiter woken late reserves
// against a bucket that drained meanwhile, so its successor's instant is
// not moved by the lateness; only the last wake-up's lateness adds to the
// total (the test allows 200 ms of it).
func TestWaitPaces(t *testing.T) {
	_, c := server(t)
	l := remote.New(c, remote.Config{})
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		t.Run(alg.String(), func(t *testing.T) {
			rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Second}
			l.Wait(context.Background(), "warm-"+alg.String(), rule) // the script loaded: EVALSHA's NOSCRIPT and EVAL count as two
			before := scriptCalls(t, c)
			var start time.Time
			for i := range 30 {
				if i == 10 {
					start = time.Now()
				}
				if d, err := l.Wait(context.Background(), "pace-"+alg.String(), rule); err != nil || !d.Allowed {
					t.Fatalf("wait %d: %+v, %v", i, d, err)
				}
			}
			got := time.Since(start)
			if got < 1800*time.Millisecond || got > 2200*time.Millisecond {
				t.Fatalf("30 waits on 10/s: %s after the burst, want 2.0 s ± 10 %%", got)
			}
			if calls := scriptCalls(t, c) - before; calls != 30 {
				t.Fatalf("30 waits took %d round trips, want 30", calls)
			}
			t.Logf("30 waits on 10/s: %s after the burst of 10", got)
		})
	}
}

// An exhausted key whose wait outlasts a 100 ms deadline refuses at once,
// in one round trip, and writes nothing. The figure is 20 ms; on a
// busy machine a round trip to the server alone can take longer, so the
// test allows 20 ms beyond twice the slower of two Peeks timed around the
// wait (the wait itself never sleeps), and holds it to the one round trip
// and to returning well before its deadline.
func TestWaitPastDeadlineRefusesAtOnce(t *testing.T) {
	_, c := server(t)
	l := remote.New(c, remote.Config{})
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket, ringlimit.FixedWindow, ringlimit.SlidingWindow, ringlimit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			rule := ringlimit.Rule{Algorithm: alg, Limit: 1, Window: time.Hour}
			key := "late-" + alg.String()
			if d, err := l.AllowN(context.Background(), key, rule, 1); err != nil || !d.Allowed {
				t.Fatalf("first hit: %+v, %v", d, err)
			}
			get := func() string {
				v, _ := c.Do(context.Background(), c.B().Get().Key(l.Key(key)).Build()).ToString()
				return v
			}
			rtt := func() time.Duration {
				start := time.Now()
				l.Peek(context.Background(), key, rule)
				return time.Since(start)
			}
			before := get()
			l.Wait(context.Background(), "warm-"+alg.String(), ringlimit.Rule{Algorithm: alg, Limit: 1, Window: time.Millisecond}) // scripts loaded
			r0, calls := rtt(), scriptCalls(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := l.Wait(ctx, key, rule)
			took := time.Since(start)
			calls = scriptCalls(t, c) - calls
			r1 := rtt()
			if !errors.Is(err, ringlimit.ErrWaitTooLong) {
				t.Fatalf("err %v, want ErrWaitTooLong", err)
			}
			if calls != 1 {
				t.Fatalf("the refusal took %d round trips, want 1", calls)
			}
			if allow := 20*time.Millisecond + 2*max(r0, r1); took > allow || took >= 100*time.Millisecond {
				t.Fatalf("refused after %s, want within %s (20 ms beyond the round trips around it) and before the deadline", took, allow)
			}
			if after := get(); after != before {
				t.Fatalf("the refused wait wrote the state: %x, then %x", before, after)
			}
			t.Logf("refused after %s", took)
		})
	}
}

// A waiter whose ctx ends gives its reservation back: on 1 per 10 s, after
// the burst, the next hit is 10 s away with the waiter's reservation
// cancelled and 20 s away without.
func TestWaitCancelReturnsAllowance(t *testing.T) {
	_, c := server(t)
	l := remote.New(c, remote.Config{})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1, Window: 10 * time.Second}
	ctx := context.Background()
	if _, err := l.Wait(ctx, "k", rule); err != nil {
		t.Fatal(err)
	}
	get := func() string {
		v, _ := c.Do(ctx, c.B().Get().Key(l.Key("k")).Build()).ToString()
		return v
	}
	burst := get()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { _, err := l.Wait(cctx, "k", rule); done <- err }()
	for deadline := time.Now().Add(5 * time.Second); get() == burst; { // the waiter reserves
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not reserve")
		}
		time.Sleep(time.Millisecond)
	}
	if d, _ := l.Peek(ctx, "k", rule); d.Allowed || d.RetryAfter <= 10*time.Second {
		t.Fatalf("with the waiter's reservation: %+v, want the next hit over 10 s away", d)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	if d, _ := l.Peek(ctx, "k", rule); d.Allowed || d.RetryAfter > 10*time.Second {
		t.Fatalf("after the cancel: %+v, want the next hit within 10 s", d)
	}
}

// 20 goroutines, 10 waits each, on 100 per second with a burst of 100: the
// 200 hits are all admitted, and not in less than the 1.0 s the 100 after
// the burst need, whatever the machine's load (a slow machine only takes
// longer).
func TestWaitConcurrentNeverOver(t *testing.T) {
	_, c := server(t)
	l := remote.New(c, remote.Config{})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 100, Window: time.Second}
	var wg sync.WaitGroup
	start := time.Now()
	for range 20 {
		wg.Go(func() {
			for range 10 {
				if d, err := l.Wait(context.Background(), "many", rule); err != nil || !d.Allowed {
					t.Errorf("wait: %+v, %v", d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	// A reservation's instant is whole ms from the server's: allow 1 ms.
	if took < 999*time.Millisecond {
		t.Fatalf("200 waits on 100/s, burst 100, in %s: over the limit", took)
	}
	t.Logf("200 waits on 100/s, burst 100, from 20 goroutines: %s", took)
}

// Bad input is refused at once, sending nothing.
func TestWaitBadInput(t *testing.T) {
	_, c := server(t)
	l := remote.New(c, remote.Config{})
	rule := ringlimit.Rule{Limit: 10, Window: time.Second}
	before := scriptCalls(t, c)
	if _, err := l.WaitN(context.Background(), "k", rule, 11); !errors.Is(err, ringlimit.ErrInvalidHits) {
		t.Fatalf("n over capacity: %v", err)
	}
	if _, err := l.WaitN(context.Background(), "", rule, 1); !errors.Is(err, ringlimit.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
	if calls := scriptCalls(t, c) - before; calls != 0 {
		t.Fatalf("bad input sent %d scripts", calls)
	}
}

// The reservation script's reply is read as hostile: any bytes decode or
// are refused with errBadReply, and what decodes gives a sane Decision.
func FuzzParseReserve(f *testing.F) {
	reply := func(status, wait, level, t, epoch int64) string {
		var b [40]byte
		for i, v := range []int64{status, wait, level, t, epoch} {
			binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
		}
		return string(b[:])
	}
	f.Add(reply(1, 100, 2000, 1_700_000_000_000, 1_700_000_000_000_000), byte(0), int64(1))
	f.Add(reply(1, 0, 1000, 5, 7), byte(1), int64(1))
	f.Add(reply(2, 5000, 9000, 5, 0), byte(0), int64(3))
	f.Add(reply(3, 1<<52, 1<<53-1, 5, 1<<53-1), byte(1), int64(1))
	f.Add(reply(1, -1, 1000, 5, 1), byte(0), int64(1))
	f.Add(reply(1, 100, 2000, 5, 0), byte(0), int64(1)) // reserved, with no epoch
	f.Add(reply(1, 100, 2000, 5, -1), byte(0), int64(1))
	f.Add(reply(1, 100, 2000, 5, 1)[:32], byte(0), int64(1)) // the reply before epochs
	f.Add("bad value", byte(0), int64(1))
	f.Fuzz(func(t *testing.T, v string, alg byte, n int64) {
		rule := ringlimit.Rule{Algorithm: ringlimit.Algorithm(alg % 2), Limit: 10, Window: time.Second, Burst: 5}
		if n < 1 || n > rule.Capacity() {
			n = 1
		}
		status, wait, level, _, d, err := remote.ParseReserve(v, rule, n)
		if err != nil {
			if !errors.Is(err, remote.ErrBadReply) {
				t.Fatalf("error %v does not wrap ErrBadReply", err)
			}
			return
		}
		if status < 1 || status > 3 || wait < 0 || level < n*rule.WindowMillis() {
			t.Fatalf("%x: accepted status %d, wait %d, level %d", v, status, wait, level)
		}
		if !d.Allowed || d.Remaining < 0 || d.Remaining > rule.Capacity() || d.ResetAfter < 0 || d.Delay != 0 {
			t.Fatalf("%x: decision %+v", v, d)
		}
	})
}
