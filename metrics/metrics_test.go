package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/metrics"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/rules"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ctx = context.Background()

// values gathers g into name{label="value",...} → value; histograms as
// name_count and name_sum.
func values(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(ls)
			suffix := ""
			if len(ls) > 0 {
				suffix = "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[f.GetName()+suffix] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[f.GetName()+suffix] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[f.GetName()+"_count"+suffix] = float64(m.GetHistogram().GetSampleCount())
				out[f.GetName()+"_sum"+suffix] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// sharedStore is a central store every node reaches: one in-memory limiter.
// It can be taken down.
type sharedStore struct {
	l    *local.Limiter
	down atomic.Bool
}

func (s *sharedStore) AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if s.down.Load() {
		return ringlimit.Decision{}, errors.New("store down (test fault)")
	}
	d, err := s.l.AllowN(ctx, key, rule, n)
	d.Source = ringlimit.Store
	return d, err
}
func (s *sharedStore) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return s.AllowN(ctx, key, rule, 0)
}
func (s *sharedStore) Reset(ctx context.Context, key string) error { return s.l.Reset(ctx, key) }

// keysOwnedBy returns n keys that owner owns in nd's view.
func keysOwnedBy(nd *node.Node, owner string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprintf("key-%d", i); nd.Owner(k) == owner {
			keys = append(keys, k)
		}
	}
	return keys
}

func registered(t *testing.T, n *node.Node) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := metrics.Register(reg, n); err != nil {
		t.Fatal(err)
	}
	return reg
}

// Known traffic through a cluster: every decision is counted once, at the
// node whose caller got it, by the source that decided and its result; the
// owner counts what it served; forwards, failures and fallbacks match.
func TestKnownTraffic(t *testing.T) {
	store := &sharedStore{l: local.New(local.Config{})}
	c := nodetest.Start(t, 3, func(cfg *node.Config) {
		cfg.Store = store
		// A forward to the live peer waits at least half of it: at 200 ms,
		// one of the 20 forwarded calls outlived its wait beside busy
		// loops (load average 12) and the store decided it. The calls on
		// the cut-off owner wait for it only until its breaker opens.
		cfg.ForwardTimeout = 2 * time.Second
		cfg.HandoffWindow = time.Millisecond
	})
	a, b, cn := c.Nodes[0], c.Nodes[1], c.Nodes[2]
	regA, regB := registered(t, a), registered(t, b)
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 3, Window: time.Hour}

	calls := 0
	hit := func(keys []string, times int) {
		for _, k := range keys {
			for range times {
				if _, err := a.Allow(ctx, k, rule); err != nil {
					t.Fatal(err)
				}
				calls++
			}
		}
	}
	hit(keysOwnedBy(a, a.Name(), 4), 5)               // local: 12 allowed, 8 denied
	hit(keysOwnedBy(a, b.Name(), 4), 5)               // peer: 12 allowed, 8 denied
	c.Network.Drop(a.Name(), cn.Name())               // the owner cannot be reached:
	hit(keysOwnedBy(a, cn.Name(), 2), 5)              // store: 6 allowed, 4 denied
	store.down.Store(true)                            // nor the store:
	hit([]string{keysOwnedBy(a, cn.Name(), 3)[2]}, 3) // fallback (Open): 3 allowed

	got := values(t, regA)
	want := map[string]float64{
		`ringlimit_decisions_total{result="allowed",source="local"}`:       12,
		`ringlimit_decisions_total{result="denied",source="local"}`:        8,
		`ringlimit_decisions_total{result="shadow_denied",source="local"}`: 0,
		`ringlimit_decisions_total{result="allowed",source="peer"}`:        12,
		`ringlimit_decisions_total{result="denied",source="peer"}`:         8,
		`ringlimit_decisions_total{result="allowed",source="store"}`:       6,
		`ringlimit_decisions_total{result="denied",source="store"}`:        4,
		`ringlimit_decisions_total{result="allowed",source="fallback"}`:    3,
		`ringlimit_decisions_total{result="denied",source="fallback"}`:     0,
		`ringlimit_forward_failures_total`:                                 13, // every call on n3's keys
		`ringlimit_fallback_decisions_total{policy="open"}`:                3,
		`ringlimit_fallback_decisions_total{policy="closed"}`:              0,
		`ringlimit_members`:                                                   3,
		`ringlimit_served_total`:                                              0,
		`ringlimit_peer_breaker_state{peer="n2"}`:                             0,
		`ringlimit_evictions_total{live="true"}`:                              0,
		`ringlimit_handoff_states_total{direction="out"}`:                     0,
		`ringlimit_writebehind_queue`:                                         0,
		`ringlimit_decision_duration_seconds_count{source="local"}`:           got[`ringlimit_decision_duration_seconds_count{source="local"}`],
		`ringlimit_keys`:                                                      4,
		`ringlimit_store_breaker_state{shard=""}`:                             got[`ringlimit_store_breaker_state{shard=""}`],
		`ringlimit_peer_conns{state="authenticated"}`:                         got[`ringlimit_peer_conns{state="authenticated"}`],
		`ringlimit_peer_refused_total{cause="cap"}`:                           0,
		`ringlimit_peer_rejected_frames_total`:                                0,
		`ringlimit_peer_breaker_state{peer="n3"}`:                             got[`ringlimit_peer_breaker_state{peer="n3"}`],
		`ringlimit_decisions_total{result="shadow_denied",source="fallback"}`: 0,
	}
	if b := got["ringlimit_memory_bytes"]; b < 4*64 { // four keys, each more than an entry
		t.Errorf("ringlimit_memory_bytes = %v for 4 keys", b)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	var sum float64
	for k, v := range got {
		if strings.HasPrefix(k, "ringlimit_decisions_total{") {
			sum += v
		}
	}
	if sum != float64(calls) {
		t.Errorf("decisions_total sums to %v, want the %d calls made", sum, calls)
	}
	// 20 to n2, and to n3 until its breaker opened.
	if f := got[`ringlimit_forwards_total`]; f < 21 || f > 33 {
		t.Errorf("forwards_total %v, want 21 to 33", f)
	}
	// n2 answered 20 calls on loopback: its timeout is the floor (1 s,
	// half the ceiling) plus this node's lag at least (a loaded 2-core
	// machine running -race shows lags of 200 ms and more), and the 2 s
	// ceiling at most.
	if to, lag := got[`ringlimit_peer_timeout_seconds{peer="n2"}`], got[`ringlimit_sched_lag_seconds`]; to > 2 || to < min(1+lag, 2)-0.005 {
		t.Errorf("peer_timeout_seconds{n2} = %v with lag %v; want 1 s + lag, at most the 2 s ceiling", to, lag)
	}
	if got[`ringlimit_peer_breaker_state{peer="n3"}`] != 2 {
		t.Errorf("peer breaker of the cut peer: %v, want 2 (open)", got[`ringlimit_peer_breaker_state{peer="n3"}`])
	}
	if s := a.Stats().Decisions; float64(s[ringlimit.Local]) != got[`ringlimit_decisions_total{result="allowed",source="local"}`]+got[`ringlimit_decisions_total{result="denied",source="local"}`] {
		t.Errorf("node.Stats().Decisions %v disagree with the series", s)
	}
	// The owner counts what it served; its callers' decisions are not its.
	gotB := values(t, regB)
	if gotB[`ringlimit_served_total`] != 20 {
		t.Errorf("owner served_total %v, want 20", gotB[`ringlimit_served_total`])
	}
	for k, v := range gotB {
		if strings.HasPrefix(k, "ringlimit_decisions_total{") && v != 0 {
			t.Errorf("owner %s = %v: it made no call of its own", k, v)
		}
	}
}

// The latency histogram holds a sample of the decisions, about 1 in 64.
func TestLatencySample(t *testing.T) {
	c := nodetest.Start(t, 1, nil)
	a := c.Nodes[0]
	reg := registered(t, a)
	rule := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	const n = 64 * 200
	for range n {
		a.Allow(ctx, "k", rule)
	}
	got := values(t, reg)
	count := got[`ringlimit_decision_duration_seconds_count{source="local"}`]
	if count < 100 || count > 300 || got[`ringlimit_decision_duration_seconds_sum{source="local"}`] <= 0 {
		t.Errorf("sampled %v of %d decisions (sum %v), want about %d", count, n,
			got[`ringlimit_decision_duration_seconds_sum{source="local"}`], n/64)
	}
	if got[`ringlimit_decisions_total{result="allowed",source="local"}`] != n {
		t.Errorf("decisions_total %v, want exactly %d", got[`ringlimit_decisions_total{result="allowed",source="local"}`], n)
	}
}

// allFamilies are the families present from the first scrape of a node in a
// cluster of two, with a Middleware and a Watcher.
var allFamilies = []string{
	"ringlimit_decisions_total", "ringlimit_decision_duration_seconds", "ringlimit_served_total",
	"ringlimit_forwards_total", "ringlimit_forward_failures_total", "ringlimit_redirects_total", "ringlimit_owner_waits_ended_total",
	"ringlimit_peer_breaker_state", "ringlimit_store_breaker_state", "ringlimit_store_breaker_opens_total",
	"ringlimit_store_errors_total", "ringlimit_store_timeouts_total", "ringlimit_store_bad_values_total",
	"ringlimit_fallback_decisions_total", "ringlimit_members", "ringlimit_keys", "ringlimit_memory_bytes",
	"ringlimit_peer_conns", "ringlimit_peer_refused_total", "ringlimit_peer_rejected_frames_total",
	"ringlimit_peer_body_timeouts_total", "ringlimit_peer_idle_closed_total", "ringlimit_peer_bad_calls_total",
	"ringlimit_evictions_total", "ringlimit_evictions_denying_total", "ringlimit_expirations_total",
	"ringlimit_handoff_states_total", "ringlimit_handoff_pulls_total", "ringlimit_handoff_failures_total",
	"ringlimit_handoff_in_progress",
	"ringlimit_writebehind_writes_total", "ringlimit_writebehind_failures_total",
	"ringlimit_writebehind_drops_total", "ringlimit_writebehind_queue",
	"ringlimit_store_loads_total", "ringlimit_store_load_failures_total",
	"ringlimit_leases_total", "ringlimit_lease_asks_total", "ringlimit_lease_recalls_total", "ringlimit_lease_decisions_total", "ringlimit_leases",
	"ringlimit_peer_timeout_seconds", "ringlimit_store_timeout_seconds", "ringlimit_sched_lag_seconds",
	"ringlimit_http_requests_total", "ringlimit_near_limit_total",
	"ringlimit_http_key_errors_total", "ringlimit_http_limiter_errors_total", "ringlimit_http_delay_expired_total",
	"ringlimit_rules_reloads_total", "ringlimit_rules",
}

func watcher(t *testing.T, yaml string) (*rules.Watcher, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := rules.NewWatcher(path, rules.WatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return w, path
}

const shadowRules = `
rules:
  - name: new
    key: ip
    algorithm: fixed_window
    limit: 2
    window: 1h
    shadow: true
  - name: old
    key: ip
    algorithm: fixed_window
    limit: 100
    window: 1h
`

// Every family is there, at zero, before any traffic, and the linter finds
// nothing to say about any of them.
func TestFirstScrapeAndLint(t *testing.T) {
	c := nodetest.Start(t, 2, nil) // no store, no peer dialled yet
	a := c.Nodes[0]
	w, _ := watcher(t, shadowRules)
	reg := registered(t, a)
	if err := metrics.RegisterMiddleware(reg, httplimit.NewMiddleware(a, httplimit.WithRules(w))); err != nil {
		t.Fatal(err)
	}
	if err := metrics.RegisterWatcher(reg, w); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			// Gauges of what exists from the start: members, rules, the
			// hand-off window after the join, the peer connection the
			// join's hand-off opened, the timeouts (their ceilings until
			// the first answer) and the lag of a machine that may be busy.
			if v != 0 && !slices.Contains([]string{"ringlimit_members", "ringlimit_rules",
				"ringlimit_handoff_in_progress", "ringlimit_peer_conns", "ringlimit_peer_timeout_seconds",
				"ringlimit_store_timeout_seconds", "ringlimit_sched_lag_seconds"}, f.GetName()) {
				t.Errorf("%s%v = %v before any traffic", f.GetName(), m.GetLabel(), v)
			}
		}
	}
	for _, want := range allFamilies {
		if !slices.Contains(names, want) {
			t.Errorf("family %s missing from the first scrape", want)
		}
	}
	if len(names) != len(allFamilies) {
		t.Errorf("%d families, want %d: %v", len(names), len(allFamilies), names)
	}
	got := values(t, reg)
	for _, k := range []string{`ringlimit_decisions_total{result="shadow_denied",source="store"}`,
		`ringlimit_http_requests_total{result="shadow_denied",rule="new"}`, `ringlimit_near_limit_total{rule="old"}`,
		`ringlimit_peer_breaker_state{peer="n2"}`, `ringlimit_rules_reloads_total{result="failure"}`} {
		if v, ok := got[k]; !ok || v != 0 {
			t.Errorf("%s = %v, present %v; want 0", k, v, ok)
		}
	}
	if got["ringlimit_rules"] != 2 || got["ringlimit_members"] != 2 {
		t.Errorf("rules %v, members %v; want 2 and 2", got["ringlimit_rules"], got["ringlimit_members"])
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// A shadow rule never answers 429; the series count exactly what it would
// have denied, at the rule and at the node.
func TestShadowRuleSeries(t *testing.T) {
	c := nodetest.Start(t, 1, nil)
	a := c.Nodes[0]
	w, _ := watcher(t, shadowRules)
	mw := httplimit.NewMiddleware(a, httplimit.WithRules(w))
	reg := registered(t, a)
	if err := metrics.RegisterMiddleware(reg, mw); err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	const requests = 10
	for i := range requests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, rec.Code)
		}
	}
	got := values(t, reg)
	for k, v := range map[string]float64{
		`ringlimit_http_requests_total{result="allowed",rule="new"}`:       2,
		`ringlimit_http_requests_total{result="shadow_denied",rule="new"}`: requests - 2,
		`ringlimit_http_requests_total{result="denied",rule="new"}`:        0,
		`ringlimit_http_requests_total{result="allowed",rule="old"}`:       requests,
		`ringlimit_near_limit_total{rule="new"}`:                           1, // the second: 0 of 2 left
		`ringlimit_near_limit_total{rule="old"}`:                           0,
		`ringlimit_decisions_total{result="shadow_denied",source="local"}`: requests - 2,
		`ringlimit_decisions_total{result="denied",source="local"}`:        0,
		`ringlimit_decisions_total{result="allowed",source="local"}`:       2 + requests,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if s := mw.Stats(); s.WouldDeny != requests-2 || s.Denied != 0 {
		t.Errorf("middleware stats %+v, want WouldDeny %d, Denied 0", s, requests-2)
	}
}

func TestWatcherReloads(t *testing.T) {
	w, path := watcher(t, shadowRules)
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterWatcher(reg, w); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte("rules: [}"), 0o600)
	w.Reload()
	os.WriteFile(path, []byte("rules:\n  - {name: only, limit: 1, window: 1s}\n"), 0o600)
	w.Reload()
	got := values(t, reg)
	if got[`ringlimit_rules_reloads_total{result="success"}`] != 1 ||
		got[`ringlimit_rules_reloads_total{result="failure"}`] != 1 || got[`ringlimit_rules`] != 1 {
		t.Errorf("got %v", got)
	}
}

func TestRegisterErrors(t *testing.T) {
	c := nodetest.Start(t, 1, nil)
	reg := registered(t, c.Nodes[0])
	if err := metrics.Register(reg, c.Nodes[0]); err == nil {
		t.Error("registering a node twice in one registry: no error")
	}
	if err := metrics.Register(nil, c.Nodes[0]); !errors.Is(err, metrics.ErrNil) {
		t.Errorf("nil registry: %v", err)
	}
	if err := metrics.Register(prometheus.NewRegistry(), nil); !errors.Is(err, metrics.ErrNil) {
		t.Errorf("nil node: %v", err)
	}
	if err := metrics.RegisterMiddleware(reg, nil); !errors.Is(err, metrics.ErrNil) {
		t.Errorf("nil middleware: %v", err)
	}
	if err := metrics.RegisterWatcher(reg, nil); !errors.Is(err, metrics.ErrNil) {
		t.Errorf("nil watcher: %v", err)
	}
	// Two nodes in one registry, each under its own label.
	c2 := nodetest.Start(t, 1, nil)
	both := prometheus.NewRegistry()
	for _, n := range []*node.Node{c.Nodes[0], c2.Nodes[0]} {
		if err := metrics.Register(prometheus.WrapRegistererWith(prometheus.Labels{"node": n.Name() + "-" + fmt.Sprint(n == c2.Nodes[0])}, both), n); err != nil {
			t.Errorf("node with its own label: %v", err)
		}
	}
	if _, err := both.Gather(); err != nil {
		t.Error(err)
	}
}
