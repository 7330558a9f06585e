package rls

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/ringlimitd/internal/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type clock struct{ ns atomic.Int64 }

func (c *clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

const testConfig = `
domain: web
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: health
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: general
    rate_limit: {name: general, unit: minute, requests_per_unit: 2}
  - key: special
    rate_limit: {unit: minute, requests_per_unit: 4, replaces: [{name: general}]}
`

// start is 20 s into a minute.
var start = time.Date(2026, 12, 7, 10, 0, 20, 0, time.UTC)

func newService(t *testing.T, cfg string) (*Service, *clock, *local.Limiter) {
	t.Helper()
	clk := &clock{}
	clk.ns.Store(start.UnixNano())
	lim := local.New(local.Config{Clock: clk})
	s := New(lim, clk.Now, nil)
	c, err := config.Load([]config.File{{Name: "t.yaml", Data: []byte(cfg)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfig(c)
	return s, clk, lim
}

func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func req(hits uint32, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "web", Descriptors: ds, HitsAddend: hits}
}

func check(t *testing.T, s *Service, r *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// codes returns the overall code and each status's code and remaining, as
// "OK OK/2 OVER_LIMIT/0".
func summary(r *pb.RateLimitResponse) string {
	s := r.OverallCode.String()
	for _, st := range r.Statuses {
		s += " " + st.Code.String()
		if st.CurrentLimit != nil {
			s += "/" + itoa(int64(st.LimitRemaining))
		}
	}
	return s
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestDecisions(t *testing.T) {
	s, _, _ := newService(t, testConfig)
	// A table of steps at one instant: each row's request and the answer.
	for i, step := range []struct {
		r    *pb.RateLimitRequest
		want string
	}{
		{req(0, desc("user", "a")), "OK OK/2"},
		{req(1, desc("user", "a")), "OK OK/1"},
		{req(2, desc("user", "a")), "OVER_LIMIT OVER_LIMIT/0"}, // 2 > 1 left: refused, nothing charged
		{req(1, desc("user", "a")), "OK OK/0"},
		{req(1, desc("user", "a")), "OVER_LIMIT OVER_LIMIT/0"},
		{req(1, desc("user", "b")), "OK OK/2"},                 // each value its own counter
		{req(4, desc("user", "c")), "OVER_LIMIT OVER_LIMIT/0"}, // above the capacity: OVER_LIMIT, not an error
		{req(1, desc("unknown", "x")), "OK OK"},
		{req(1, desc("health", "x")), "OK OK"},
		{req(1, desc("zero", "x")), "OVER_LIMIT OVER_LIMIT/0"},
		{&pb.RateLimitRequest{Domain: "nope", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "a")}}, "OK OK"},
	} {
		if got := summary(check(t, s, step.r)); got != step.want {
			t.Errorf("step %d: %s, want %s", i, got, step.want)
		}
	}
}

func TestResponseFields(t *testing.T) {
	s, _, _ := newService(t, testConfig)
	r := check(t, s, req(1, desc("user", "a"), desc("health", "h"), desc("nothing", "n")))
	st := r.Statuses[0]
	if st.CurrentLimit.RequestsPerUnit != 3 || st.CurrentLimit.Unit != pb.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("current_limit %v", st.CurrentLimit)
	}
	if got := st.DurationUntilReset.AsDuration(); got != 40*time.Second {
		t.Errorf("duration_until_reset %v, want 40s (20 s into the minute)", got)
	}
	if r.Statuses[1].LimitRemaining != math.MaxUint32 || r.Statuses[1].CurrentLimit != nil {
		t.Errorf("unlimited: %v", r.Statuses[1])
	}
	src := r.DynamicMetadata.Fields["ringlimit"].GetStructValue().Fields["sources"].GetListValue().Values
	if len(src) != 3 || src[0].GetStringValue() != "local" || src[1].GetStringValue() != "" || src[2].GetStringValue() != "" {
		t.Errorf("sources %v", src)
	}
}

// TestAllOrNothing: a request whose one descriptor refuses charges no
// other; unlimited, shadow-mode and unmatched descriptors never refuse.
func TestAllOrNothing(t *testing.T) {
	s, _, lim := newService(t, testConfig)
	ctx := context.Background()
	check(t, s, req(3, desc("user", "full"))) // user "full" at its limit
	for range 4 {
		if got := summary(check(t, s, req(1, desc("tenant", "t"), desc("user", "full")))); got != "OVER_LIMIT OK/5 OVER_LIMIT/0" {
			t.Fatalf("got %s", got)
		}
	}
	d, _ := lim.Peek(ctx, counterKey("web", desc("tenant", "t").Entries), ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Minute})
	if d.Remaining != 5 {
		t.Fatalf("tenant t charged by refused requests: remaining %d", d.Remaining)
	}
	// Shadow mode, unlimited and unmatched descriptors never block.
	for i := range 3 {
		got := summary(check(t, s, req(1, desc("tenant", "u"), desc("shadow", "s"), desc("health", "h"), desc("none", "n"))))
		want := []string{"OK OK/4 OK/0 OK OK", "OK OK/3 OK/0 OK OK", "OK OK/2 OK/0 OK OK"}[i]
		if got != want {
			t.Fatalf("round %d: %s, want %s", i, got, want)
		}
	}
	// Two limited descriptors both under their limits: both charged.
	if got := summary(check(t, s, req(1, desc("tenant", "v"), desc("user", "v")))); got != "OK OK/4 OK/2" {
		t.Fatalf("got %s", got)
	}
}

func TestReplaces(t *testing.T) {
	s, _, _ := newService(t, testConfig)
	// special replaces general: general's counter is not consulted.
	for i := range 4 {
		got := summary(check(t, s, req(1, desc("general", "g"), desc("special", "s"))))
		want := "OK OK OK/" + string(rune('3'-i))
		if got != want {
			t.Fatalf("round %d: %s, want %s", i, got, want)
		}
	}
	// Alone, general applies.
	check(t, s, req(2, desc("general", "g")))
	if got := summary(check(t, s, req(1, desc("general", "g")))); got != "OVER_LIMIT OVER_LIMIT/0" {
		t.Fatalf("general alone: %s", got)
	}
}

func TestWindowRollsOver(t *testing.T) {
	s, clk, _ := newService(t, testConfig)
	check(t, s, req(3, desc("user", "a")))
	if got := summary(check(t, s, req(1, desc("user", "a")))); got != "OVER_LIMIT OVER_LIMIT/0" {
		t.Fatal(got)
	}
	clk.ns.Add(int64(40 * time.Second)) // the next minute
	if got := summary(check(t, s, req(1, desc("user", "a")))); got != "OK OK/2" {
		t.Fatal(got)
	}
}

func TestDescriptorHitsAddend(t *testing.T) {
	s, _, _ := newService(t, testConfig)
	d := desc("user", "a")
	d.HitsAddend = wrapperspb.UInt64(2)
	if got := summary(check(t, s, req(1, d))); got != "OK OK/1" {
		t.Fatal(got)
	}
}

func TestLimitOverride(t *testing.T) {
	s, _, _ := newService(t, testConfig)
	d := desc("anything", "x")
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 1} // 1 per second
	if got := summary(check(t, s, req(1, d))); got != "OK OK/0" {
		t.Fatal(got)
	}
	if got := summary(check(t, s, req(1, d))); got != "OVER_LIMIT OVER_LIMIT/0" {
		t.Fatal(got)
	}
}

// fallback answers every call as the fail-open policy would.
type fallback struct{}

func (fallback) AllowN(_ context.Context, _ string, r ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	return ringlimit.Decision{Allowed: true, Limit: r.Limit, Remaining: r.Limit - n, Source: ringlimit.Fallback}, nil
}
func (f fallback) Peek(ctx context.Context, k string, r ringlimit.Rule) (ringlimit.Decision, error) {
	return f.AllowN(ctx, k, r, 1)
}

func TestFailureMode(t *testing.T) {
	s := New(fallback{}, nil, nil)
	for _, tc := range []struct{ cfg, want, src string }{
		{"domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n", "OK OK/2", "fallback"},
		{"domain: web\nfailure_mode_deny: true\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n", "OVER_LIMIT OVER_LIMIT/0", "fallback"},
	} {
		c, err := config.Load([]config.File{{Name: "t", Data: []byte(tc.cfg)}}, false)
		if err != nil {
			t.Fatal(err)
		}
		s.SetConfig(c)
		r := check(t, s, req(1, desc("user", "a")))
		if got := summary(r); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.cfg, got, tc.want)
		}
		if got := r.DynamicMetadata.Fields["ringlimit"].GetStructValue().Fields["sources"].GetListValue().Values[0].GetStringValue(); got != tc.src {
			t.Errorf("source %q", got)
		}
	}
}

func TestBadRequests(t *testing.T) {
	s, _, _ := newService(t, testConfig)
	long := strings.Repeat("x", MaxEntryLen+1)
	many := make([]*rlv3.RateLimitDescriptor, MaxDescriptors+1)
	for i := range many {
		many[i] = desc("user", "a")
	}
	deep := &rlv3.RateLimitDescriptor{}
	for range MaxEntries + 1 {
		deep.Entries = append(deep.Entries, &rlv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	for _, r := range []*pb.RateLimitRequest{
		{Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "a")}},
		{Domain: "web"},
		{Domain: "web", Descriptors: many},
		{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{deep}},
		{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", long)}},
		{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{desc("", "v")}},
		{Domain: "web", Descriptors: []*rlv3.RateLimitDescriptor{{}}},
	} {
		_, err := s.ShouldRateLimit(context.Background(), r)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: error %v, want InvalidArgument", r, err)
		}
	}
}

func TestCounterKeyEscapes(t *testing.T) {
	a := counterKey("d", desc("a", "b|c=d").Entries)
	b := counterKey("d", desc("a", "b", "c", "d").Entries)
	if a == b {
		t.Fatalf("two descriptors share the key %q", a)
	}
}

// refusing refuses the n-th AllowN, after its peek said yes: another
// request took the last hits in between.
type refusing struct {
	*local.Limiter
	calls, refuse int
	given         []string
}

func (r *refusing) AllowN(ctx context.Context, k string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	r.calls++
	if r.calls == r.refuse {
		return ringlimit.Decision{Limit: rule.Limit}, nil
	}
	return r.Limiter.AllowN(ctx, k, rule, n)
}

func (r *refusing) GiveBack(_ context.Context, k string, _ ringlimit.Rule, _ int64, _ ringlimit.Decision, _ time.Time) error {
	r.given = append(r.given, k)
	return nil
}

func TestRefusedAfterPeekGivesBack(t *testing.T) {
	lim := &refusing{Limiter: local.New(local.Config{}), refuse: 2}
	s := New(lim, nil, nil)
	c, _ := config.Load([]config.File{{Name: "t", Data: []byte(testConfig)}}, false)
	s.SetConfig(c)
	r := check(t, s, req(1, desc("tenant", "t"), desc("user", "u")))
	if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT || r.Statuses[1].Code != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("got %s", summary(r))
	}
	if len(lim.given) != 1 || lim.given[0] != counterKey("web", desc("tenant", "t").Entries) {
		t.Fatalf("given back %q, want the tenant's charge", lim.given)
	}
}

// TestHardGiversChargedLast: a leaky bucket's or a sliding log's charge,
// the hardest to give back, comes after the others' whatever the order of
// the request, so that a refusal at the last charge leaves only the
// others' to give back.
func TestHardGiversChargedLast(t *testing.T) {
	cfg := testConfig + `  - key: queue
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: leaky_bucket}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
`
	for _, first := range []string{"queue", "log"} {
		lim := &refusing{Limiter: local.New(local.Config{}), refuse: 2}
		s := New(lim, nil, nil)
		c, err := config.Load([]config.File{{Name: "t", Data: []byte(cfg)}}, false)
		if err != nil {
			t.Fatal(err)
		}
		s.SetConfig(c)
		r := check(t, s, req(1, desc(first, "x"), desc("tenant", "x")))
		if r.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%s first: got %s", first, summary(r))
		}
		if len(lim.given) != 1 || lim.given[0] != counterKey("web", desc("tenant", "x").Entries) {
			t.Fatalf("%s first: given back %q, want the tenant's charge (the %s charged last, and refused)", first, lim.given, first)
		}
	}
}
