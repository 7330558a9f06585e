package rls

import (
	"context"
	"errors"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// What envoyproxy/ratelimit does (at the version docs/ringlimitd.md names),
// pinned.

// TestDescriptorHitsAddendZero: a descriptor's own hits_addend of 0 checks
// without charging (the reference's "check only"); the request's 0 means 1.
func TestDescriptorHitsAddendZero(t *testing.T) {
	s, _, _ := newService(t, testConfig)
	zero := desc("user", "z")
	zero.HitsAddend = wrapperspb.UInt64(0)
	for range 4 {
		if got := summary(check(t, s, req(0, zero))); got != "OK OK/3" {
			t.Fatalf("check only: %s, want nothing charged", got)
		}
	}
	check(t, s, req(3, desc("user", "z")))
	if got := summary(check(t, s, req(0, zero))); got != "OVER_LIMIT OVER_LIMIT/0" {
		t.Fatalf("check only, at the limit: %s", got)
	}
}

// TestQuotaMode pins envoyproxy/ratelimit's quota mode: a quota-mode
// limit over its quota answers OK with limit_remaining 0 and no
// duration_until_reset, never refuses the request, and is reported by its
// index in the metadata's quotaModeViolations; quotaModeEnabled says
// whether any limit of the request is in quota mode. Unlike shadow mode,
// whose over-limit status keeps its duration_until_reset.
func TestQuotaMode(t *testing.T) {
	s, _, _ := newService(t, testConfig)
	md := func(r *pb.RateLimitResponse) (bool, []float64) {
		f := r.DynamicMetadata.GetFields()
		var v []float64
		for _, x := range f["quotaModeViolations"].GetListValue().GetValues() {
			v = append(v, x.GetNumberValue())
		}
		return f["quotaModeEnabled"].GetBoolValue(), v
	}
	r := check(t, s, req(1, desc("user", "q"), desc("quota", "q")))
	if got := summary(r); got != "OK OK/2 OK/0" {
		t.Fatalf("first: %s", got)
	}
	if on, v := md(r); !on || len(v) != 0 || r.Statuses[1].DurationUntilReset == nil {
		t.Fatalf("first: quotaModeEnabled %v, violations %v, status %v", on, v, r.Statuses[1])
	}
	r = check(t, s, req(1, desc("user", "q"), desc("quota", "q")))
	if got := summary(r); got != "OK OK/1 OK/0" {
		t.Fatalf("over the quota: %s (a quota never refuses)", got)
	}
	if on, v := md(r); !on || len(v) != 1 || v[0] != 1 {
		t.Fatalf("over the quota: quotaModeEnabled %v, violations %v, want [1]", on, v)
	}
	if st := r.Statuses[1]; st.DurationUntilReset != nil || st.CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("over the quota: status %v, want current_limit and no duration_until_reset", st)
	}
	// Shadow mode over its limit keeps the duration, and is no violation.
	check(t, s, req(1, desc("shadow", "s")))
	r = check(t, s, req(1, desc("shadow", "s")))
	if on, v := md(r); on || len(v) != 0 || r.Statuses[0].DurationUntilReset == nil || summary(r) != "OK OK/0" {
		t.Fatalf("shadow: %s, quotaModeEnabled %v, violations %v, status %v", summary(r), on, v, r.Statuses[0])
	}
}

// TestQuotaModeObserved: a quota over its quota is counted as
// quota_over_limit, apart from shadow mode's.
func TestQuotaModeObserved(t *testing.T) {
	s, _, _ := newService(t, testConfig)
	var o codesSeen
	s.obs = &o
	check(t, s, req(1, desc("quota", "o")))
	check(t, s, req(1, desc("quota", "o")))
	check(t, s, req(1, desc("shadow", "o")))
	check(t, s, req(1, desc("shadow", "o")))
	if got := strings.Join(o, " "); got != "ok quota_over_limit ok shadow_over_limit" {
		t.Fatalf("observed %s", got)
	}
}

type codesSeen []string

func (c *codesSeen) Descriptor(_, _, code string) { *c = append(*c, code) }
func (c *codesSeen) Request(string, string)       {}

// TestNegativeHitsRefused: a descriptor with is_negative_hits (a refund)
// is refused as a bad request, and charges nothing: counted as hits, as
// envoyproxy/ratelimit (which does not know the field) counts it, a refund
// would use up the budget it means to give back.
func TestNegativeHitsRefused(t *testing.T) {
	s, _, _ := newService(t, testConfig)
	neg := desc("user", "n")
	neg.IsNegativeHits = true
	neg.HitsAddend = wrapperspb.UInt64(2)
	for _, r := range []*pb.RateLimitRequest{req(1, neg), req(1, desc("tenant", "n"), neg)} {
		_, err := s.ShouldRateLimit(context.Background(), r)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "is_negative_hits") {
			t.Fatalf("error %v, want InvalidArgument naming is_negative_hits", err)
		}
		if _, err := s.Check(context.Background(), r); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("Check: %v, want ErrBadRequest", err)
		}
	}
	if got := summary(check(t, s, req(1, desc("user", "n"), desc("tenant", "n")))); got != "OK OK/2 OK/4" {
		t.Fatalf("after the refused refunds: %s, want nothing charged", got)
	}
}
