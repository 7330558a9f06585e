package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/rules"
)

// shadowSeen is a Limiter that passes calls to a recorder and remembers,
// per key prefix, how many calls carried ringlimit.WithShadow.
type shadowSeen struct {
	*recorder
	shadow map[string]int
}

func (s *shadowSeen) AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if ringlimit.IsShadow(ctx) {
		s.shadow[key]++
	}
	return s.recorder.AllowN(ctx, key, rule, n)
}

// A shadow rule decides and reports but never blocks: its denials count in
// WouldDeny and as ShadowDenied, the other rules are still enforced after
// it, and its calls reach the limiter marked as shadow calls.
func TestShadowRule(t *testing.T) {
	set, err := rules.Parse([]byte(`
rules:
  - name: new
    key: ip
    algorithm: fixed_window
    limit: 2
    window: 60s
    shadow: true
  - name: old
    key: ip
    algorithm: fixed_window
    limit: 5
    window: 60s
`))
	if err != nil {
		t.Fatal(err)
	}
	lim := &shadowSeen{newRecorder(t0), map[string]int{}}
	mw := httplimit.NewMiddleware(lim, httplimit.WithRules(set))
	next := new(counting)
	h := mw.Handler(next)

	var codes []int
	for i := range 10 {
		w := get(h, "/x")
		codes = append(codes, w.Code)
		switch {
		case i < 2:
			checkHeaders(t, fmt.Sprint("request ", i), w, map[string]string{
				"X-RateLimit-Limit":     "2",
				"X-RateLimit-Remaining": fmt.Sprint(1 - i),
				"X-RateLimit-Reset":     "60",
				"RateLimit-Policy":      `"new";q=2;w=60, "old";q=5;w=60`,
				"RateLimit":             fmt.Sprintf(`"new";r=%d;t=60`, 1-i), // the binding one
			})
		case i < 5: // the shadow rule denies, the old one admits: passed on, no Retry-After
			checkHeaders(t, fmt.Sprint("request ", i), w, map[string]string{
				"X-RateLimit-Limit":     "2",
				"X-RateLimit-Remaining": "0",
				"X-RateLimit-Reset":     "60",
				"RateLimit-Policy":      `"new";q=2;w=60, "old";q=5;w=60`,
				"RateLimit":             `"new";r=0;t=60`,
			})
		}
	}
	want := []int{200, 200, 200, 200, 200, 429, 429, 429, 429, 429}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("codes %v, want %v", codes, want)
	}
	if n := next.n.Load(); n != 5 {
		t.Errorf("%d requests reached the handler, want 5", n)
	}
	st := mw.Stats()
	if st.Allowed != 2 || st.WouldDeny != 3 || st.Denied != 5 {
		t.Errorf("stats %+v, want Allowed 2, WouldDeny 3, Denied 5", st)
	}
	wantRules := []httplimit.RuleStats{
		{Name: "new", Allowed: 2, ShadowDenied: 8, NearLimit: 1},
		{Name: "old", Allowed: 5, Denied: 5, NearLimit: 1},
	}
	if got := mw.RuleStats(); fmt.Sprint(got) != fmt.Sprint(wantRules) {
		t.Errorf("rule stats %+v, want %+v", got, wantRules)
	}
	if lim.shadow["new:192.0.2.1"] != 10 || lim.shadow["old:192.0.2.1"] != 0 {
		t.Errorf("shadow calls by key %v, want 10 for new and none for old", lim.shadow)
	}
}

// Only a shadow rule: never a 429, and WouldDeny is exactly the requests
// over its limit.
func TestShadowRuleAlone(t *testing.T) {
	ip, err := rules.ParseKeySpec("ip")
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.NewSet(rules.Rule{Name: "try", Key: ip, Shadow: true,
		Rule: ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 3, Window: 60e9}})
	if err != nil {
		t.Fatal(err)
	}
	mw := httplimit.NewMiddleware(newRecorder(t0), httplimit.WithRules(set))
	h := mw.Handler(new(counting))
	for i := range 20 {
		if w := get(h, "/", from(fmt.Sprintf("192.0.2.%d:1", i%2+1))); w.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	if st := mw.Stats(); st.WouldDeny != 14 || st.Allowed != 6 || st.Denied != 0 {
		t.Errorf("stats %+v, want WouldDeny 14, Allowed 6, Denied 0", st)
	}
	if rs := mw.RuleStats(); len(rs) != 1 || rs[0].ShadowDenied != 14 || rs[0].Allowed != 6 || rs[0].Denied != 0 {
		t.Errorf("rule stats %+v", rs)
	}
}

// Rules in force are listed at zero before any request.
func TestRuleStatsListsRulesInForce(t *testing.T) {
	set, err := rules.Parse([]byte("rules:\n  - {name: b, limit: 1, window: 1s}\n  - {name: a, limit: 1, window: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := httplimit.NewMiddleware(newRecorder(t0), httplimit.WithRules(set)).RuleStats()
	want := []httplimit.RuleStats{{Name: "a"}, {Name: "b"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%+v, want %+v", got, want)
	}
	got = httplimit.NewMiddleware(newRecorder(t0), httplimit.WithRule("fixed", ringlimit.Rule{Limit: 1, Window: 1e9})).RuleStats()
	if len(got) != 1 || got[0].Name != "fixed" {
		t.Errorf("fixed rule: %+v", got)
	}
}

// Counters are kept for at most MaxRuleStats rule names; the rest count
// under OtherRules.
func TestRuleStatsBound(t *testing.T) {
	var rs []rules.Rule
	ip, err := rules.ParseKeySpec("ip")
	if err != nil {
		t.Fatal(err)
	}
	const n = httplimit.MaxRuleStats + 100
	for i := range n {
		rs = append(rs, rules.Rule{Name: fmt.Sprintf("r%04d", i), Key: ip,
			Rule: ringlimit.Rule{Limit: 10, Window: 60e9}})
	}
	set, err := rules.NewSet(rs...)
	if err != nil {
		t.Fatal(err)
	}
	mw := httplimit.NewMiddleware(newRecorder(t0), httplimit.WithRules(set))
	get(mw.Handler(new(counting)), "/")
	got := mw.RuleStats()
	if len(got) != httplimit.MaxRuleStats+1 {
		t.Fatalf("%d rule stats, want %d", len(got), httplimit.MaxRuleStats+1)
	}
	var total uint64
	for _, s := range got {
		total += s.Allowed
		if s.Name == httplimit.OtherRules && s.Allowed != n-httplimit.MaxRuleStats {
			t.Errorf("%s allowed %d, want %d", s.Name, s.Allowed, n-httplimit.MaxRuleStats)
		}
	}
	if total != n {
		t.Errorf("%d allowed decisions counted, want %d", total, n)
	}
}

// A rule decided before a later rule's key error is still counted.
func TestRuleStatsBeforeKeyError(t *testing.T) {
	set, err := rules.Parse([]byte("rules:\n  - {name: a, limit: 5, window: 1s}\n  - {name: b, key: 'header:X-Key', limit: 5, window: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	mw := httplimit.NewMiddleware(newRecorder(t0), httplimit.WithRules(set))
	if w := get(mw.Handler(new(counting)), "/"); w.Code != http.StatusBadRequest {
		t.Fatalf("no key: %d, want 400", w.Code)
	}
	want := []httplimit.RuleStats{{Name: "a", Allowed: 1}, {Name: "b"}}
	if got := mw.RuleStats(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%+v, want %+v", got, want)
	}
}
