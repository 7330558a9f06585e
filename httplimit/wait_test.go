package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/rules"
)

// 1 per 100 ms, burst 1.
var tenth = ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 1}

// WithWait queues a request whose turn comes within max, and refuses one
// whose turn is further.
func TestWithWaitQueues(t *testing.T) {
	for _, c := range []struct {
		name   string
		opts   []httplimit.Option
		code   int
		took   time.Duration
		queued uint64
	}{
		{"no wait", nil, http.StatusTooManyRequests, 0, 0},
		{"turn within max", []httplimit.Option{httplimit.WithWait(500 * time.Millisecond)}, http.StatusOK, 100 * time.Millisecond, 1},
		{"turn past max", []httplimit.Option{httplimit.WithWait(50 * time.Millisecond)}, http.StatusTooManyRequests, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := append([]httplimit.Option{httplimit.WithRule("api", tenth), httplimit.WithKey(httplimit.Header("X-Key"))}, c.opts...)
				m := httplimit.NewMiddleware(local.New(local.Config{}), opts...)
				h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				serve := func() int {
					r := httptest.NewRequest("GET", "/", nil)
					r.Header.Set("X-Key", "a")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					return w.Code
				}
				if code := serve(); code != http.StatusOK {
					t.Fatalf("first request: %d", code)
				}
				start := time.Now()
				if code := serve(); code != c.code {
					t.Fatalf("second request: %d, want %d", code, c.code)
				}
				if took := time.Since(start); took != c.took {
					t.Fatalf("second request took %s, want %s", took, c.took)
				}
				if q := m.Stats().Queued; q != c.queued {
					t.Fatalf("Queued %d, want %d", q, c.queued)
				}
			})
		})
	}
}

// roundTripFunc is a Base that counts the requests it sends.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The Transport sends each request in its turn: five on 1 per 100 ms take
// 400 ms; one whose turn is past its deadline is not sent, fails with
// ErrWaitTooLong at once, and its body is closed.
func TestTransportPaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent atomic.Int64
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent.Add(1)
			return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
		})
		tr := &httplimit.Transport{Waiter: local.New(local.Config{}), Rule: tenth, Base: base}
		start := time.Now()
		for range 5 {
			req := httptest.NewRequest("GET", "https://api.example/", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if took := time.Since(start); took != 400*time.Millisecond {
			t.Fatalf("5 requests on 1 per 100 ms took %s, want 400 ms", took)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		body := &closeCounter{Reader: strings.NewReader("x")}
		req := httptest.NewRequestWithContext(ctx, "POST", "https://api.example/", body)
		start = time.Now()
		if _, err := tr.RoundTrip(req); !errors.Is(err, ringlimit.ErrWaitTooLong) {
			t.Fatalf("past the deadline: %v, want ErrWaitTooLong", err)
		}
		if time.Since(start) != 0 || sent.Load() != 5 || body.closed.Load() != 1 {
			t.Fatalf("refused after %s, %d sent, body closed %d times", time.Since(start), sent.Load(), body.closed.Load())
		}
		// Hosts have their own limits by default.
		if _, err := tr.RoundTrip(httptest.NewRequest("GET", "https://other.example/", nil)); err != nil {
			t.Fatal(err)
		}
	})
}

type closeCounter struct {
	io.Reader
	closed atomic.Int64
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// With rules, a denying rule of one limit waits its turn; a shadow rule
// and a rule of several limits do not.
func TestWithWaitRules(t *testing.T) {
	set, err := rules.Parse([]byte(`
rules:
  - {name: one, endpoint: /one, algorithm: token_bucket, limit: 10, burst: 1, window: 1s}
  - {name: two, endpoint: /two, limits: [{algorithm: token_bucket, limit: 10, burst: 1, window: 1s}, {limit: 100, window: 1m}]}
  - {name: shadow, endpoint: /shadow, algorithm: token_bucket, limit: 10, burst: 1, window: 1s, shadow: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path   string
		code   int // of the third request
		took   time.Duration
		queued uint64
	}{
		{"/one", http.StatusOK, 100 * time.Millisecond, 1},
		{"/two", http.StatusTooManyRequests, 0, 0},
		{"/shadow", http.StatusOK, 0, 0},
	} {
		t.Run(c.path, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := httplimit.NewMiddleware(local.New(local.Config{}), httplimit.WithRules(set), httplimit.WithWait(time.Second))
				h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				for range 2 {
					h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", c.path, nil))
				}
				start := time.Now()
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", c.path, nil))
				if w.Code != c.code {
					t.Fatalf("third request: %d, want %d", w.Code, c.code)
				}
				// The second request waited (or not) too: the third's wait is one more turn.
				if took := time.Since(start); took != c.took {
					t.Fatalf("third request took %s, want %s", took, c.took)
				}
				if q := m.Stats().Queued; q != 2*c.queued {
					t.Fatalf("Queued %d, want %d", q, 2*c.queued)
				}
			})
		})
	}
}
