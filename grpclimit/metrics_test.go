package grpclimit_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/metrics"
	"github.com/ringlimit/ringlimit/rules"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gather returns reg's series: "name{label=value,…}" (labels sorted, as
// Gather gives them) → value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[f.GetName()+"{"+strings.Join(ls, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

// Register exports the interceptor's counters of real calls: per rule,
// allowed and denied; calls without a key.
func TestRegisterCounts(t *testing.T) {
	set, err := rules.Parse([]byte(`
rules:
  - {name: health, match: {path: /grpc.health.v1.Health/}, key: header:x-api-key, algorithm: sliding_log, limit: 2, window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	lim := grpclimit.New(local.New(local.Config{}), grpclimit.WithRules(set))
	reg := prometheus.NewRegistry()
	if err := grpclimit.Register(reg, lim); err != nil {
		t.Fatal(err)
	}
	before := gather(t, reg)
	for _, k := range []string{
		"ringlimit_grpc_requests_total{result=allowed,rule=health}",
		"ringlimit_grpc_requests_total{result=denied,rule=health}",
		"ringlimit_grpc_key_errors_total{}",
	} {
		if v, ok := before[k]; !ok || v != 0 {
			t.Errorf("before any call: %s = %v (present %v), want 0 from the first scrape", k, v, ok)
		}
	}

	s := serve(t, lim.Unary(), lim.Stream())
	c := s.client(t)
	for i := range 3 {
		_, _, err := check(t, c, "x-api-key", "k1")
		if want := map[bool]codes.Code{true: codes.OK, false: codes.ResourceExhausted}[i < 2]; status.Code(err) != want {
			t.Fatalf("call %d: %v, want %v", i+1, err, want)
		}
	}
	if _, _, err := check(t, c); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a call without the key: %v", err)
	}
	got := gather(t, reg)
	for k, want := range map[string]float64{
		"ringlimit_grpc_requests_total{result=allowed,rule=health}":       2,
		"ringlimit_grpc_requests_total{result=denied,rule=health}":        1,
		"ringlimit_grpc_requests_total{result=shadow_denied,rule=health}": 0,
		"ringlimit_grpc_near_limit_total{rule=health}":                    1, // the second left 0 of 2
		"ringlimit_grpc_key_errors_total{}":                               1,
		"ringlimit_grpc_limiter_errors_total{}":                           0,
		"ringlimit_grpc_delay_expired_total{}":                            0,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}

	if err := grpclimit.Register(reg, lim); err == nil {
		t.Error("registering the same interceptor twice in one registry: no error")
	}
	for _, err := range []error{grpclimit.Register(nil, lim), grpclimit.Register(prometheus.NewRegistry(), nil)} {
		if !errors.Is(err, grpclimit.ErrNilInterceptor) {
			t.Errorf("nil argument: %v, want ErrNilInterceptor", err)
		}
	}
}

// grpclimit's series are httplimit's (package metrics), for calls: each
// ringlimit_http_X or ringlimit_X of RegisterMiddleware has a
// ringlimit_grpc_X with the same labels, and there are no others.
func TestSeriesMatchHTTP(t *testing.T) {
	names := func(reg *prometheus.Registry) map[string][]string {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, f := range fams {
			var ls []string
			for _, l := range f.GetMetric()[0].GetLabel() {
				ls = append(ls, l.GetName())
			}
			out[f.GetName()] = ls
		}
		return out
	}
	lim := local.New(local.Config{})
	rule := perMinute(5)
	hreg, greg := prometheus.NewRegistry(), prometheus.NewRegistry()
	if err := metrics.RegisterMiddleware(hreg, httplimit.NewMiddleware(lim, httplimit.WithRule("r", rule))); err != nil {
		t.Fatal(err)
	}
	if err := grpclimit.Register(greg, grpclimit.New(lim, grpclimit.WithRule("r", rule))); err != nil {
		t.Fatal(err)
	}
	h, g := names(hreg), names(greg)
	if len(h) == 0 || len(h) != len(g) {
		t.Fatalf("http series %v, grpc series %v", h, g)
	}
	for name, labels := range h {
		rest := strings.TrimPrefix(strings.TrimPrefix(name, "ringlimit_"), "http_")
		gl, ok := g["ringlimit_grpc_"+rest]
		if !ok || !slices.Equal(gl, labels) {
			t.Errorf("%s%v: ringlimit_grpc_%s has labels %v (present %v)", name, labels, rest, gl, ok)
		}
	}
}
