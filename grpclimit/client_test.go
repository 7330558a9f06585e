package grpclimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/local"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// fakeWaiter records each WaitN and answers with d and err.
type fakeWaiter struct {
	mu   sync.Mutex
	keys []string
	d    ringlimit.Decision
	err  error
}

func (w *fakeWaiter) WaitN(_ context.Context, key string, _ ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n != 1 {
		return ringlimit.Decision{}, ringlimit.ErrInvalidHits
	}
	w.keys = append(w.keys, key)
	return w.d, w.err
}

// manualClock is a clock that moves only when told.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// localWaiter waits on a *local.Limiter by retrying AllowN after each
// denial's RetryAfter, which it "sleeps" by moving the limiter's manual
// clock (for tests only: a real Waiter waits without polling).
type localWaiter struct {
	l     *local.Limiter
	clock *manualClock
}

func (w localWaiter) WaitN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	for {
		d, err := w.l.AllowN(ctx, key, rule, n)
		if err != nil || d.Allowed {
			return d, err
		}
		if err := ctx.Err(); err != nil {
			return d, err
		}
		w.clock.advance(d.RetryAfter)
	}
}

var _ grpclimit.Waiter = (*fakeWaiter)(nil)
var _ grpclimit.Waiter = localWaiter{}

func TestClientWaitsBeforeEachCall(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_700_000_000, 0)}
	w := localWaiter{l: local.New(local.Config{Clock: clock}), clock: clock}
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1, Window: time.Second}
	s := serve(t, nil, nil)
	c := s.client(t,
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(w, "out", rule, nil)),
		grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(w, "out", rule, nil)))
	start := clock.Now()
	for i := range 4 {
		if _, _, err := check(t, c); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	// One hit a second: the first call passes at once, each other waits a
	// second.
	if got := clock.Now().Sub(start); got != 3*time.Second {
		t.Errorf("4 calls at 1/s waited %v in all, want 3s", got)
	}
	// A stream's key is its own method's: it does not wait for Check's.
	st, err := c.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	if got := clock.Now().Sub(start); got != 3*time.Second {
		t.Errorf("the stream waited on Check's key: %v in all", got)
	}
	if n := s.handled.Load(); n != 5 {
		t.Errorf("%d calls reached the server, want 5", n)
	}
}

func TestClientKeysAndFailures(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second}
	tenant := func(context.Context, string) (string, error) { return "t1", nil }
	noKey := func(context.Context, string) (string, error) { return "", grpclimit.ErrNoKey }
	tests := []struct {
		name     string
		w        *fakeWaiter
		key      grpclimit.KeyFunc
		wantKey  string
		wantErr  error // errors.Is target; nil for a call that is sent
		wantCode codes.Code
	}{
		{name: "method key", w: &fakeWaiter{d: ringlimit.Decision{Allowed: true}}, wantKey: "out:/grpc.health.v1.Health/Check"},
		{name: "own key", w: &fakeWaiter{d: ringlimit.Decision{Allowed: true}}, key: tenant, wantKey: "out:t1"},
		{name: "context ended", w: &fakeWaiter{err: context.DeadlineExceeded}, wantKey: "out:/grpc.health.v1.Health/Check", wantErr: context.DeadlineExceeded},
		{name: "bad rule", w: &fakeWaiter{err: ringlimit.ErrInvalidRule}, wantKey: "out:/grpc.health.v1.Health/Check", wantErr: ringlimit.ErrInvalidRule},
		{name: "no key", w: &fakeWaiter{}, key: noKey, wantErr: grpclimit.ErrNoKey},
		{name: "denied without error", w: &fakeWaiter{}, wantKey: "out:/grpc.health.v1.Health/Check", wantCode: codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := serve(t, nil, nil)
			c := s.client(t, grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(tt.w, "out", rule, tt.key)))
			_, _, err := check(t, c)
			switch {
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("call: %v, want %v", err, tt.wantErr)
			case tt.wantCode != codes.OK && status.Code(err) != tt.wantCode:
				t.Errorf("call: %v, want %v", err, tt.wantCode)
			case tt.wantErr == nil && tt.wantCode == codes.OK && err != nil:
				t.Errorf("call: %v", err)
			}
			sent := int64(0)
			if err == nil {
				sent = 1
			}
			if n := s.handled.Load(); n != sent {
				t.Errorf("%d calls reached the server, want %d", n, sent)
			}
			if tt.wantKey != "" && (len(tt.w.keys) != 1 || tt.w.keys[0] != tt.wantKey) {
				t.Errorf("waited on %q, want %q", tt.w.keys, tt.wantKey)
			}
		})
	}
}
