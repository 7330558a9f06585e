package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
)

// countingWaiter is a local.Limiter that counts the waits that returned.
type countingWaiter struct {
	*local.Limiter
	returned atomic.Int64
}

func (c *countingWaiter) WaitN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	defer c.returned.Add(1)
	return c.Limiter.WaitN(ctx, key, rule, n)
}

// Behind WithWait on a route-wide key, a client opens 100 requests over
// the limit, which queue, and drops them all (their contexts end, as when
// their connections close): the next real request is served as if they
// had never come. (Issue 40: the dropped requests' cancels gave back only
// what no later one was promised, and the first real request waited
// 3.16 s behind WithWait(5s); on 25 a second, this test measured 4.00 s
// where 40 ms was due.)
//
// The limiter's clock is set by the test, so its decisions are exact: a
// request may act every 5 s, the burst of 25 is spent, and the 100 queued
// requests put the route's next turn 505 s away. The test drops them,
// then moves the clock 5 s on: without them, the next request is admitted
// at once. The dropped requests sleep on real timers of 5 s and more, so
// none is served before it is dropped; the real request has 3 s, so on
// the old code it fails at that deadline (its turn was 500 s away) instead
// of making the test wait. The bound of 1 s on it leaves a loopback request
// and a goroutine's wake-up plenty on a busy machine.
func TestWithWaitDroppedRequestsCostNothing(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 12, Window: time.Minute, Burst: 25}
	interval := rule.Window / time.Duration(rule.Limit)
	clk := testclock.New(time.Now())
	lim := &countingWaiter{Limiter: local.New(local.Config{Clock: clk})}
	m := httplimit.NewMiddleware(lim, httplimit.WithRule("api", rule), httplimit.WithKey(httplimit.Route), httplimit.WithWait(10*time.Minute))
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()
	get := func(ctx context.Context) (int, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/items", nil)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	ctx := context.Background()
	for i := range rule.Capacity() { // the burst
		if code, err := get(ctx); err != nil || code != http.StatusOK {
			t.Fatalf("request %d of the burst: %d, %v", i, code, err)
		}
	}
	const dropped = 100
	cctx, drop := context.WithCancel(ctx)
	defer drop()
	errs := make(chan error, dropped)
	for range dropped {
		go func() { _, err := get(cctx); errs <- err }()
	}
	waitUntil(t, 10*time.Second, "the dropped requests queued", func() bool {
		d, _ := lim.Peek(ctx, "api:/items", rule) // (the middleware prefixes the rule's name)
		return d.RetryAfter == (dropped+1)*interval
	})
	drop()
	for range dropped {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("a dropped request: %v", err)
		}
	}
	waitUntil(t, 10*time.Second, "the server to see them dropped", func() bool { return lim.returned.Load() == dropped })
	clk.Advance(interval)
	rctx, stop := context.WithTimeout(ctx, 3*time.Second)
	defer stop()
	start := time.Now()
	code, err := get(rctx)
	took := time.Since(start)
	t.Logf("after %d dropped requests, the real request: %d in %v", dropped, code, took)
	if err != nil || code != http.StatusOK {
		t.Fatalf("the real request: %d, %v; want it served at once, as if the dropped ones never came", code, err)
	}
	if took > time.Second {
		t.Fatalf("the real request waited %v after %d dropped ones: want it served at once", took, dropped)
	}
}

// waitUntil polls cond until it holds, failing t after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}
