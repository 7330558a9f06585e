package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
)

// t0 is the start of a minute, so fixed windows of 60 s begin there.
var t0 = time.Unix(1_700_000_000-20, 0)

// recorder is a Limiter that passes calls to a local Limiter on a manual
// clock and remembers the last key and Decision.
type recorder struct {
	clock *testclock.Clock
	l     *local.Limiter
	mu    sync.Mutex
	keys  []string
	last  ringlimit.Decision
}

func newRecorder(at time.Time) *recorder {
	clk := testclock.New(at)
	return &recorder{clock: clk, l: local.New(local.Config{Clock: clk})}
}

func (r *recorder) AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	d, err := r.l.AllowN(ctx, key, rule, n)
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.last = d
	r.mu.Unlock()
	return d, err
}

func (r *recorder) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return r.l.Peek(ctx, key, rule)
}

func (r *recorder) Reset(ctx context.Context, key string) error { return r.l.Reset(ctx, key) }

func (r *recorder) lastDecision() ringlimit.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// fixed is a Limiter that answers every call with d and err.
type fixed struct {
	d   ringlimit.Decision
	err error
}

func (f fixed) AllowN(context.Context, string, ringlimit.Rule, int64) (ringlimit.Decision, error) {
	return f.d, f.err
}
func (f fixed) Peek(context.Context, string, ringlimit.Rule) (ringlimit.Decision, error) {
	return f.d, f.err
}
func (f fixed) Reset(context.Context, string) error { return f.err }

// counting is a handler that counts its calls and answers 200 "ok".
type counting struct{ n atomic.Int64 }

func (c *counting) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	c.n.Add(1)
	w.Write([]byte("ok"))
}

func get(h http.Handler, target string, edit ...func(*http.Request)) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", target, nil)
	for _, e := range edit {
		e(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func from(remote string) func(*http.Request) { return func(r *http.Request) { r.RemoteAddr = remote } }

func header(name string, values ...string) func(*http.Request) {
	return func(r *http.Request) {
		for _, v := range values {
			r.Header.Add(name, v)
		}
	}
}

// rateLimitHeaders are every header the middleware may set.
var rateLimitHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"RateLimit-Policy", "RateLimit", "Retry-After", "X-RateLimit-Retry-After"}

func checkHeaders(t *testing.T, step string, w *httptest.ResponseRecorder, want map[string]string) {
	t.Helper()
	if v, ok := want["Retry-After"]; ok { // the article's name carries the same value
		want["X-RateLimit-Retry-After"] = v
	}
	for _, h := range rateLimitHeaders {
		got, ok := w.Header()[http.CanonicalHeaderKey(h)]
		wantV, wantOK := want[h]
		switch {
		case ok != wantOK:
			t.Errorf("%s: header %s present %v (%q), want %v", step, h, ok, got, wantOK)
		case ok && (len(got) != 1 || got[0] != wantV):
			t.Errorf("%s: %s = %q, want %q", step, h, got, wantV)
		}
	}
}
