package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/rules"
)

// multiRecorder is a recorder that is also a MultiLimiter: under one lock
// it peeks every (key, index) and consumes only if all admit. Index 0 is
// the key itself, as in every tier. A test fake of the contract, not of any
// tier's implementation.
type multiRecorder struct{ *recorder }

func (r multiRecorder) AllowAll(ctx context.Context, key string, rs []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	if err := ringlimit.ValidateRules(rs); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	idx := func(i int) string {
		if i == 0 {
			return key
		}
		return fmt.Sprintf("%s\x00#%d", key, i)
	}
	ds := make([]ringlimit.Decision, len(rs))
	all := true
	for i, rule := range rs {
		d, err := r.l.Peek(ctx, idx(i), rule)
		if err != nil {
			return nil, err
		}
		ds[i], all = d, all && d.Allowed
	}
	if !all {
		return ds, nil
	}
	for i, rule := range rs {
		d, err := r.l.AllowN(ctx, idx(i), rule, n)
		if err != nil {
			return nil, err
		}
		ds[i] = d
	}
	r.keys = append(r.keys, key)
	return ds, nil
}

func TestSeveralLimitsAllOrNothing(t *testing.T) {
	set, err := rules.Parse([]byte(`
rules:
  - name: api
    key: header:X-Api-Key
    algorithm: fixed_window
    limits: [{limit: 2, window: 60s}, {limit: 3, window: 3600s}]
`))
	if err != nil {
		t.Fatal(err)
	}
	lim := multiRecorder{newRecorder(t0)}
	mw := httplimit.NewMiddleware(lim, httplimit.WithRules(set))
	h := mw.Handler(new(counting))
	key := header("X-Api-Key", "k")
	get(h, "/", key)
	w := get(h, "/", key)
	checkHeaders(t, "2nd", w, map[string]string{
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
		"RateLimit-Policy": `"api";q=2;w=60, "api#1";q=3;w=3600`,
		"RateLimit":        `"api";r=0;t=60`,
	})
	w = get(h, "/", key) // the minute denies: the hour must not be charged
	if w.Code != 429 {
		t.Fatalf("3rd: %d, want 429", w.Code)
	}
	checkHeaders(t, "3rd", w, map[string]string{
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "60",
		"RateLimit-Policy": `"api";q=2;w=60, "api#1";q=3;w=3600`,
		"RateLimit":        `"api";r=0;t=60`,
		"Retry-After":      "60",
	})
	lim.clock.Advance(time.Minute) // a new minute: the hour has 1 left, not 0
	if w := get(h, "/", key); w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "3" || w.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("4th: %d %v, want 200 with the hour binding at 0 left", w.Code, w.Header())
	}
	w = get(h, "/", key)
	if w.Code != 429 || w.Header().Get("X-RateLimit-Limit") != "3" {
		t.Fatalf("5th: %d %v, want 429 by the hour", w.Code, w.Header())
	}

	// The rule counts once per request, by its binding limit: 3 allowed
	// (the 2nd and 4th near the limit), 2 denied.
	want := []httplimit.RuleStats{{Name: "api", Allowed: 3, Denied: 2, NearLimit: 2}}
	if got := mw.RuleStats(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rule stats %+v, want %+v", got, want)
	}

	// A limiter that cannot apply several limits is a limiter error.
	plain := httplimit.New(newRecorder(t0), httplimit.WithRules(set))(new(counting))
	if w := get(plain, "/", key); w.Code != 500 {
		t.Fatalf("without a MultiLimiter: %d, want 500", w.Code)
	}
	if !errors.Is(httplimit.ErrNoMulti, ringlimit.ErrInvalidRule) {
		t.Fatal("ErrNoMulti does not wrap ErrInvalidRule")
	}
}

func TestOverrides(t *testing.T) {
	set, err := rules.Parse([]byte(`
rules:
  - name: api
    key: header:X-Api-Key
    algorithm: fixed_window
    limit: 1
    window: 60s
    overrides:
      - match: {header: {X-Tier: gold}}
        limits: [{limit: 3, window: 60s}]
      - keys: [free-pass]
        unlimited: true
`))
	if err != nil {
		t.Fatal(err)
	}
	lim := multiRecorder{newRecorder(t0)}
	next := new(counting)
	h := httplimit.New(lim, httplimit.WithRules(set))(next)
	k := header("X-Api-Key", "t1")
	gold := header("X-Tier", "gold")
	if w := get(h, "/", k); w.Code != 200 {
		t.Fatalf("default 1st: %d", w.Code)
	}
	if w := get(h, "/", k); w.Code != 429 {
		t.Fatalf("default 2nd: %d, want 429", w.Code)
	}
	// Gold: its own state, not the exhausted default count of t1.
	for i := range 3 {
		w := get(h, "/", k, gold)
		if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "3" {
			t.Fatalf("gold %d: %d limit %q, want 200 under 3", i+1, w.Code, w.Header().Get("X-RateLimit-Limit"))
		}
	}
	if w := get(h, "/", k, gold); w.Code != 429 {
		t.Fatalf("gold 4th: %d, want 429", w.Code)
	}
	// The default state of another tenant is untouched by t1's gold hits.
	if w := get(h, "/", header("X-Api-Key", "t2")); w.Code != 200 {
		t.Fatalf("t2: %d", w.Code)
	}
	// Unlimited: never limited, no headers, the limiter not asked.
	before := len(lim.keys)
	for range 5 {
		w := get(h, "/", header("X-Api-Key", "free-pass"), gold)
		if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "" {
			t.Fatalf("free-pass: %d %v", w.Code, w.Header())
		}
	}
	if len(lim.keys) != before {
		t.Fatalf("unlimited asked the limiter %d times", len(lim.keys)-before)
	}
	for _, key := range lim.keys {
		if key == "api:t1" || key == "api:t2" {
			continue
		}
		if key != "api\x000:t1" {
			t.Errorf("unexpected state key %q", key)
		}
	}
}
