package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/rules"
)

func secs(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// Every header on allowed and denied responses, against the Decision.
func TestHeaders(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 2, Window: time.Minute}
	lim := newRecorder(t0.Add(30*time.Second + 300*time.Millisecond)) // 29.7 s left in the window
	next := new(counting)
	h := httplimit.New(lim, httplimit.WithRule("api", rule))(next)

	for i, step := range []struct {
		status    int
		remaining int64
		retry     string // "" when allowed
	}{
		{200, 1, ""},
		{200, 0, ""},
		{429, 0, "30"},
	} {
		w := get(h, "/x")
		d := lim.lastDecision()
		name := fmt.Sprintf("request %d", i+1)
		if w.Code != step.status || d.Remaining != step.remaining || d.Allowed != (step.retry == "") {
			t.Fatalf("%s: status %d, decision %+v; want %d, remaining %d", name, w.Code, d, step.status, step.remaining)
		}
		if d.ResetAfter != 29700*time.Millisecond {
			t.Fatalf("%s: ResetAfter %v, want 29.7s", name, d.ResetAfter)
		}
		want := map[string]string{
			"X-RateLimit-Limit":     strconv.FormatInt(d.Limit, 10),
			"X-RateLimit-Remaining": strconv.FormatInt(d.Remaining, 10),
			"X-RateLimit-Reset":     secs(d.ResetAfter),
			"RateLimit-Policy":      `"api";q=2;w=60`,
			"RateLimit":             fmt.Sprintf(`"api";r=%d;t=%s`, d.Remaining, secs(d.ResetAfter)),
		}
		if want["X-RateLimit-Reset"] != "30" || want["X-RateLimit-Limit"] != "2" {
			t.Fatalf("%s: bad expectations %v", name, want)
		}
		if step.retry != "" {
			want["Retry-After"] = secs(d.RetryAfter)
			if want["Retry-After"] != step.retry {
				t.Fatalf("%s: RetryAfter %v, want %s s", name, d.RetryAfter, step.retry)
			}
		}
		checkHeaders(t, name, w, want)
	}
	if next.n.Load() != 2 {
		t.Errorf("handler ran %d times, want 2", next.n.Load())
	}
	w := get(h, "/x")
	if ct := w.Header().Get("Content-Type"); ct != "application/json" ||
		w.Body.String() != `{"error":"rate limit exceeded","retry_after":30}`+"\n" {
		t.Errorf("429 body %q (%s)", w.Body, ct)
	}
}

// Retry-After and the reset values are whole seconds rounded up; Retry-After
// is at least 1.
func TestSecondsRoundUp(t *testing.T) {
	rule := ringlimit.Rule{Limit: 1, Window: 1500 * time.Millisecond}
	for _, tc := range []struct {
		retry, reset       time.Duration
		wantRetry, wantRst string
	}{
		{0, 0, "1", "0"},
		{time.Millisecond, time.Millisecond, "1", "1"},
		{999 * time.Millisecond, time.Second, "1", "1"},
		{time.Second, 1001 * time.Millisecond, "1", "2"},
		{1001 * time.Millisecond, 59500 * time.Millisecond, "2", "60"},
	} {
		lim := fixed{d: ringlimit.Decision{Limit: 1, RetryAfter: tc.retry, ResetAfter: tc.reset}}
		w := get(httplimit.New(lim, httplimit.WithRule("r", rule))(new(counting)), "/")
		checkHeaders(t, fmt.Sprintf("RetryAfter %v, ResetAfter %v", tc.retry, tc.reset), w, map[string]string{
			"X-RateLimit-Limit":     "1",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     tc.wantRst,
			"RateLimit-Policy":      `"r";q=1;w=2`,
			"RateLimit":             `"r";r=0;t=` + tc.wantRetry, // a 429: t is Retry-After
			"Retry-After":           tc.wantRetry,
		})
	}
}

func TestShadowNeverBlocks(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: time.Minute}
	lim := newRecorder(t0)
	next := new(counting)
	m := httplimit.NewMiddleware(lim, httplimit.WithRule("api", rule), httplimit.WithShadow())
	h := m.Handler(next)
	for i := range 3 {
		w := get(h, "/")
		if w.Code != 200 {
			t.Fatalf("request %d: status %d, want 200", i+1, w.Code)
		}
		checkHeaders(t, fmt.Sprintf("request %d", i+1), w, map[string]string{
			"X-RateLimit-Limit":     "1",
			"X-RateLimit-Remaining": "0",
			"X-RateLimit-Reset":     "60",
			"RateLimit-Policy":      `"api";q=1;w=60`,
			"RateLimit":             `"api";r=0;t=60`,
		})
	}
	if st := m.Stats(); next.n.Load() != 3 || st.WouldDeny != 2 || st.Denied != 0 || st.Allowed != 1 {
		t.Errorf("handler ran %d times, stats %+v; want 3, WouldDeny 2, Allowed 1", next.n.Load(), st)
	}

	// Errors pass too.
	closed := httplimit.NewMiddleware(fixed{err: ringlimit.ErrClosed}, httplimit.WithRule("api", rule), httplimit.WithShadow())
	noKey := httplimit.NewMiddleware(lim, httplimit.WithRule("api", rule), httplimit.WithShadow(),
		httplimit.WithKey(httplimit.Header("X-Api-Key")))
	for name, m := range map[string]*httplimit.Middleware{"closed limiter": closed, "no key": noKey} {
		if w := get(m.Handler(next), "/"); w.Code != 200 {
			t.Errorf("%s in shadow mode: status %d, want 200", name, w.Code)
		}
	}
}

func TestLimiterErrors(t *testing.T) {
	rule := ringlimit.Rule{Limit: 1, Window: time.Second}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	lim := fixed{err: fmt.Errorf("node: %w (secret internals 10.1.2.3)", ringlimit.ErrClosed)}

	next := new(counting)
	m := httplimit.NewMiddleware(lim, httplimit.WithRule("api", rule), httplimit.WithLogger(log))
	w := get(m.Handler(next), "/")
	if w.Code != 500 || next.n.Load() != 0 {
		t.Errorf("closed limiter: status %d, handler ran %d; want 500, 0", w.Code, next.n.Load())
	}
	if b := w.Body.String(); strings.Contains(b, "closed") || strings.Contains(b, "10.1.2.3") || strings.Contains(b, "ringlimit") {
		t.Errorf("500 body leaks internals: %q", b)
	}
	if !strings.Contains(logs.String(), "secret internals") {
		t.Errorf("the error was not logged: %q", logs.String())
	}
	checkHeaders(t, "closed limiter", w, nil)

	open := httplimit.NewMiddleware(lim, httplimit.WithRule("api", rule), httplimit.WithFailOpen())
	w = get(open.Handler(next), "/")
	if w.Code != 200 || next.n.Load() != 1 || open.Stats().LimiterErrors != 1 {
		t.Errorf("fail open: status %d, handler ran %d, stats %+v; want 200, 1, 1 error", w.Code, next.n.Load(), open.Stats())
	}
	checkHeaders(t, "fail open", w, nil)

	// A key the limiter refuses is the client's problem: 400.
	long := httplimit.New(local.New(local.Config{}), httplimit.WithRule("api", rule),
		httplimit.WithKey(httplimit.Header("X-Api-Key")))
	w = get(long(next), "/", header("X-Api-Key", strings.Repeat("k", ringlimit.MaxKeyLen)))
	if w.Code != 400 {
		t.Errorf("over-long key: status %d, want 400", w.Code)
	}
}

func TestKeyErrors(t *testing.T) {
	rule := ringlimit.Rule{Limit: 5, Window: time.Second}
	next := new(counting)
	opts := []httplimit.Option{httplimit.WithRule("api", rule), httplimit.WithKey(httplimit.Header("x-api-key"))}
	h := httplimit.New(local.New(local.Config{}), opts...)(next)
	if w := get(h, "/"); w.Code != 400 || next.n.Load() != 0 {
		t.Errorf("no key: status %d, handler ran %d; want 400, 0", w.Code, next.n.Load())
	}
	if w := get(h, "/", header("X-Api-Key", "k1")); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "4" {
		t.Errorf("with key: status %d, remaining %q; want 200, 4", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	var gotErr error
	custom := httplimit.New(local.New(local.Config{}), append(opts, httplimit.WithKeyError(
		func(w http.ResponseWriter, _ *http.Request, err error) { gotErr = err; w.WriteHeader(401) }))...)(next)
	if w := get(custom, "/"); w.Code != 401 || !errors.Is(gotErr, httplimit.ErrNoKey) {
		t.Errorf("custom key error: status %d, err %v; want 401 and ErrNoKey", w.Code, gotErr)
	}
}

func TestDeniedHandler(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: time.Minute}
	var queued []ringlimit.Decision
	var retryAtCall string
	m := httplimit.NewMiddleware(newRecorder(t0), httplimit.WithRule("orders", rule),
		httplimit.WithDenied(func(w http.ResponseWriter, r *http.Request, d ringlimit.Decision) {
			queued = append(queued, d)
			retryAtCall = w.Header().Get("Retry-After")
			w.WriteHeader(http.StatusAccepted)
		}))
	next := new(counting)
	h := m.Handler(next)
	get(h, "/")
	w := get(h, "/")
	if w.Code != 202 || len(queued) != 1 || queued[0].Allowed || retryAtCall != "60" || next.n.Load() != 1 {
		t.Errorf("status %d, queued %v, Retry-After at call %q, handler ran %d; want 202, one denial, 60, 1",
			w.Code, queued, retryAtCall, next.n.Load())
	}
	if st := m.Stats(); st.Denied != 1 || st.Allowed != 1 {
		t.Errorf("stats %+v, want 1 allowed, 1 denied", st)
	}
}

func TestNoRuleSourcePassesEverything(t *testing.T) {
	next := new(counting)
	w := get(httplimit.New(fixed{err: errors.New("must not be called")})(next), "/")
	if w.Code != 200 || next.n.Load() != 1 {
		t.Errorf("status %d, handler ran %d; want 200, 1", w.Code, next.n.Load())
	}
	checkHeaders(t, "no rules", w, nil)
}

// A leaky bucket's Delay is waited out before the handler runs; a context
// that ends first gets 503 and the handler never runs. synctest's fake clock
// makes the waits instant and exact.
func TestLeakyBucketDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rule := ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 10, Window: time.Second, Burst: 3}
		m := httplimit.NewMiddleware(local.New(local.Config{}), httplimit.WithRule("q", rule))
		var ranAt []time.Duration
		start := time.Now()
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			ranAt = append(ranAt, time.Since(start))
		}))

		if w := get(h, "/"); w.Code != 200 { // Delay 0
			t.Fatalf("first: %d", w.Code)
		}
		if w := get(h, "/"); w.Code != 200 { // Delay 100 ms, waited
			t.Fatalf("second: %d", w.Code)
		}
		if len(ranAt) != 2 || ranAt[0] != 0 || ranAt[1] != 100*time.Millisecond {
			t.Fatalf("handler ran at %v, want [0s 100ms]", ranAt)
		}

		// Now slot 200 ms is next but one: Delay 100 ms from here. A
		// deadline 50 ms away cannot wait it out: 503 at once.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		before := time.Now()
		w := get(h, "/", func(r *http.Request) { *r = *r.WithContext(ctx) })
		if w.Code != 503 || len(ranAt) != 2 || time.Since(before) != 0 || w.Header().Get("Retry-After") != "1" {
			t.Fatalf("short deadline: status %d after %v, Retry-After %q, handler runs %d; want 503 at once, 1, 2",
				w.Code, time.Since(before), w.Header().Get("Retry-After"), len(ranAt))
		}

		// A context cancelled while waiting ends the wait.
		ctx2, cancel2 := context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel2)
		before = time.Now()
		w = get(h, "/", func(r *http.Request) { *r = *r.WithContext(ctx2) })
		if w.Code != 503 || len(ranAt) != 2 || time.Since(before) != 30*time.Millisecond {
			t.Fatalf("cancelled: status %d after %v; want 503 after 30ms", w.Code, time.Since(before))
		}
		if st := m.Stats(); st.DelayExpired != 2 || st.Allowed != 2 {
			t.Errorf("stats %+v, want DelayExpired 2, Allowed 2", st)
		}
	})
}

// Several matching rules: all are applied, in order, until one denies; the
// X- headers and RateLimit report the binding one, RateLimit-Policy lists
// each applied.
func TestSeveralRules(t *testing.T) {
	set, err := rules.Parse([]byte(`
rules:
  - name: global
    key: ip
    algorithm: fixed_window
    limit: 3
    window: 60s
  - name: login
    match: {path: /api/login}
    key: ip
    algorithm: fixed_window
    limit: 1
    window: 10s
`))
	if err != nil {
		t.Fatal(err)
	}
	lim := newRecorder(t0)
	h := httplimit.New(lim, httplimit.WithRules(set))(new(counting))

	w := get(h, "/api/login")
	checkHeaders(t, "first login", w, map[string]string{
		"X-RateLimit-Limit":     "1",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "10",
		"RateLimit-Policy":      `"global";q=3;w=60, "login";q=1;w=10`,
		"RateLimit":             `"login";r=0;t=10`, // the binding one
	})
	w = get(h, "/api/login")
	if w.Code != 429 {
		t.Fatalf("second login: %d, want 429", w.Code)
	}
	checkHeaders(t, "second login", w, map[string]string{
		"X-RateLimit-Limit":     "1",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "10",
		"RateLimit-Policy":      `"global";q=3;w=60, "login";q=1;w=10`,
		"RateLimit":             `"login";r=0;t=10`,
		"Retry-After":           "10",
	})
	w = get(h, "/other") // only global; the denied login was charged to it
	checkHeaders(t, "other", w, map[string]string{
		"X-RateLimit-Limit":     "3",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "60",
		"RateLimit-Policy":      `"global";q=3;w=60`,
		"RateLimit":             `"global";r=0;t=60`,
	})
	// The most restrictive need not be the last applied.
	tightFirst, err := rules.Parse([]byte("rules:\n  - {name: tight, endpoint: /x, limit: 1, window: 10s}\n  - {name: loose, limit: 5, window: 60s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	w = get(httplimit.New(newRecorder(t0), httplimit.WithRules(tightFirst))(new(counting)), "/x")
	checkHeaders(t, "tight first", w, map[string]string{
		"X-RateLimit-Limit":     "1",
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Reset":     "10",
		"RateLimit-Policy":      `"tight";q=1;w=10, "loose";q=5;w=60`,
		"RateLimit":             `"tight";r=0;t=10`,
	})

	want := []string{"global:192.0.2.1", "login:192.0.2.1", "global:192.0.2.1", "login:192.0.2.1", "global:192.0.2.1"}
	if fmt.Sprint(lim.keys) != fmt.Sprint(want) {
		t.Errorf("keys %q, want %q", lim.keys, want)
	}
}

// The route key is the ServeMux pattern: /items/1 and /items/2 share a limit.
func TestRouteKey(t *testing.T) {
	set, err := rules.Parse([]byte("rules:\n  - name: per-route\n    key: route,header:X-Api-Key\n    algorithm: fixed_window\n    limit: 2\n    window: 60s\n"))
	if err != nil {
		t.Fatal(err)
	}
	lim := newRecorder(t0)
	mw := httplimit.New(lim, httplimit.WithRules(set))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", mw(new(counting)))
	mux.Handle("GET /other", mw(new(counting)))
	key := header("X-Api-Key", "k")
	codes := []int{get(mux, "/items/1", key).Code, get(mux, "/items/2", key).Code, get(mux, "/items/3", key).Code, get(mux, "/other", key).Code}
	if fmt.Sprint(codes) != "[200 200 429 200]" {
		t.Errorf("codes %v, want [200 200 429 200]", codes)
	}
	if lim.keys[0] != "per-route:GET /items/{id}|k" || lim.keys[3] != "per-route:GET /other|k" {
		t.Errorf("keys %q", lim.keys)
	}
}
