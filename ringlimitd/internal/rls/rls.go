// Package rls serves Envoy's rate-limit service, v3
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), on a
// ringlimit Limiter, with envoyproxy/ratelimit's config (package config).
//
// A request is all or nothing. Its limited descriptors are first peeked;
// if one would refuse, the request is refused and nothing is charged. Else
// each is charged in turn, leaky buckets and sliding logs last (their
// give-backs take back the least); a charge refused by then (another
// request took the last hits in between) refuses the request and gives
// back what this request charged before it, where the Limiter can
// (Giver). So a request is admitted only if every limited descriptor
// admitted it: never more than an exact limiter, at worst slightly less
// under contention.
//
// Service is safe for simultaneous use.
package rls

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/ringlimitd/internal/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Bounds on one request; a request outside them is an InvalidArgument
// error, decided for no descriptor.
const (
	MaxDescriptors = 64   // descriptors per request
	MaxEntries     = 32   // entries per descriptor
	MaxEntryLen    = 1024 // bytes of one entry's key or value, and of the domain
)

// Limiter is what the service needs of a ringlimit node.
type Limiter interface {
	AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error)
	Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error)
}

// Giver is a Limiter that can give back hits a call charged at the
// instant at (the Service's clock, read just before the call), as
// *node.Node does. A Limiter without it keeps the hits of a request
// refused between its peek and its last charge.
type Giver interface {
	GiveBack(ctx context.Context, key string, rule ringlimit.Rule, n int64, charged ringlimit.Decision, at time.Time) error
}

// Observer is told each descriptor's outcome (metrics). domain is "" for a
// domain the config does not hold; path is the matched config descriptor's
// keys ("" when unmatched); code is "ok", "over_limit", "unlimited",
// "unmatched", "shadow_over_limit", "quota_over_limit" or "error".
type Observer interface {
	Descriptor(domain, path, code string)
	Request(domain, code string) // code: "ok" or "over_limit"
}

// Service answers ShouldRateLimit.
type Service struct {
	pb.UnimplementedRateLimitServiceServer
	lim Limiter
	cfg atomic.Pointer[config.Config]
	now func() time.Time
	obs Observer
}

// New returns a Service deciding on lim; now nil means time.Now, obs nil
// observes nothing. It holds an empty config until SetConfig.
func New(lim Limiter, now func() time.Time, obs Observer) *Service {
	if now == nil {
		now = time.Now
	}
	s := &Service{lim: lim, now: now, obs: obs}
	s.cfg.Store(&config.Config{})
	return s
}

// SetConfig replaces the config for the requests that start from now on.
func (s *Service) SetConfig(c *config.Config) { s.cfg.Store(c) }

// Config is the config in force.
func (s *Service) Config() *config.Config { return s.cfg.Load() }

var _ pb.RateLimitServiceServer = (*Service)(nil)

// ErrBadRequest is wrapped by Check's errors for a request outside the
// bounds or the protocol's rules.
var ErrBadRequest = errors.New("ringlimitd: bad request")

// ShouldRateLimit is Check with its errors as gRPC statuses.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	resp, err := s.Check(ctx, req)
	switch {
	case err == nil:
		return resp, nil
	case errors.Is(err, ErrBadRequest):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return nil, status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return nil, status.Error(codes.DeadlineExceeded, err.Error())
	}
	return nil, status.Error(codes.Unavailable, err.Error())
}

// item is one descriptor's work.
type item struct {
	lim     *config.Limit
	key     string
	hits    int64
	path    string
	code    pb.RateLimitResponse_Code
	d       ringlimit.Decision
	decided bool // d holds a decision
	charged bool // d's hits were charged
	over    bool // a shadow- or quota-mode limit that would have refused
	at      time.Time
	obs     string
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// Validate checks req against the bounds and the protocol.
func Validate(req *pb.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return bad("rate limit domain must not be empty")
	}
	if len(req.Domain) > MaxEntryLen {
		return bad("domain of %d bytes, over %d", len(req.Domain), MaxEntryLen)
	}
	if len(req.Descriptors) == 0 {
		return bad("rate limit descriptor list must not be empty")
	}
	if len(req.Descriptors) > MaxDescriptors {
		return bad("%d descriptors, over %d", len(req.Descriptors), MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if len(d.GetEntries()) == 0 {
			return bad("descriptors[%d]: no entries", i)
		}
		if len(d.Entries) > MaxEntries {
			return bad("descriptors[%d]: %d entries, over %d", i, len(d.Entries), MaxEntries)
		}
		if d.GetIsNegativeHits() {
			// A refund of hits charged before (Envoy's is_negative_hits):
			// nothing tells which charge it refunds, and a sliding log or a
			// leaky bucket cannot take back hits it cannot place, so it is
			// refused rather than counted as hits (as envoyproxy/ratelimit,
			// whose protos predate the field, does).
			return bad("descriptors[%d]: is_negative_hits is not supported", i)
		}
		n := len(req.Domain)
		for j, e := range d.Entries {
			if e.GetKey() == "" {
				return bad("descriptors[%d].entries[%d]: empty key", i, j)
			}
			if len(e.Key) > MaxEntryLen || len(e.Value) > MaxEntryLen {
				return bad("descriptors[%d].entries[%d]: key or value over %d bytes", i, j, MaxEntryLen)
			}
			n += len(e.Key) + len(e.Value) + 2
		}
		if n > ringlimit.MaxKeyLen/2 {
			return bad("descriptors[%d]: %d bytes of entries, over %d", i, n, ringlimit.MaxKeyLen/2)
		}
	}
	return nil
}

// Check decides req (see the package doc).
func (s *Service) Check(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if err := Validate(req); err != nil {
		return nil, err
	}
	cfg := s.cfg.Load()
	dom := cfg.Domain(req.Domain)
	domLabel := ""
	if dom != nil {
		domLabel = dom.Name
	}
	items := make([]item, len(req.Descriptors))
	replaced := map[string]bool{}
	for i, d := range req.Descriptors {
		it := &items[i]
		it.hits = hitsOf(req, d)
		it.lim = limitOf(dom, d)
		if it.lim != nil {
			it.path = it.lim.Path
			for _, r := range it.lim.Replaces {
				replaced[r] = true
			}
		}
	}
	for i := range items {
		it := &items[i]
		if it.lim != nil && it.lim.Name != "" && replaced[it.lim.Name] && !it.lim.Unlimited {
			it.lim, it.path = nil, ""
		}
		switch {
		case it.lim == nil:
			it.obs = "unmatched"
		case it.lim.Unlimited:
			it.obs = "unlimited"
		default:
			it.key = counterKey(req.Domain, req.Descriptors[i].Entries)
		}
	}
	deny := dom != nil && dom.FailureModeDeny
	admit, err := s.decide(ctx, items, deny)
	if err != nil {
		return nil, err
	}
	now := s.now()
	resp := &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: make([]*pb.RateLimitResponse_DescriptorStatus, len(items))}
	if !admit {
		resp.OverallCode = pb.RateLimitResponse_OVER_LIMIT
	}
	sources := make([]*structpb.Value, len(items))
	var violations []*structpb.Value // quota-mode limits over their quota
	quota := false
	for i := range items {
		it := &items[i]
		st := &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
		sources[i] = structpb.NewStringValue("")
		switch {
		case it.lim == nil:
		case it.lim.Unlimited:
			st.LimitRemaining = math.MaxUint32
		default:
			l := it.lim
			st.CurrentLimit = &pb.RateLimitResponse_RateLimit{Name: l.Name, RequestsPerUnit: l.RequestsPerUnit, Unit: pb.RateLimitResponse_RateLimit_Unit(l.Unit)}
			if w := l.Unit.Duration(); w > 0 && !(l.QuotaMode && it.over) {
				// (A quota-mode limit over its quota answers without it, as
				// envoyproxy/ratelimit's does.)
				// In whole seconds, rounded up, as envoyproxy/ratelimit
				// (which counts in whole seconds too).
				left := w - time.Duration(now.UnixNano()%int64(w))
				st.DurationUntilReset = durationpb.New((left + time.Second - 1).Truncate(time.Second))
			}
			if it.code == pb.RateLimitResponse_OVER_LIMIT {
				st.Code = pb.RateLimitResponse_OVER_LIMIT
			} else {
				rem := it.d.Remaining
				if !it.d.Allowed && !it.charged {
					rem = 0
				}
				st.LimitRemaining = uint32(min(max(rem, 0), math.MaxUint32))
			}
			if it.decided {
				sources[i] = structpb.NewStringValue(it.d.Source.String())
			}
			if l.QuotaMode {
				quota = true
				if it.over {
					violations = append(violations, structpb.NewNumberValue(float64(i)))
				}
			}
		}
		resp.Statuses[i] = st
		if s.obs != nil {
			s.obs.Descriptor(domLabel, it.path, it.obs)
		}
	}
	if s.obs != nil {
		code := "ok"
		if !admit {
			code = "over_limit"
		}
		s.obs.Request(domLabel, code)
	}
	resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
		"ringlimit": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"sources": structpb.NewListValue(&structpb.ListValue{Values: sources}),
		}}),
		// envoyproxy/ratelimit's quota-mode fields, under its names: the
		// indices of the descriptors over a quota-mode limit, and whether
		// any limit of the request is one.
		"quotaModeEnabled": structpb.NewBoolValue(quota),
	}}
	if len(violations) > 0 {
		resp.DynamicMetadata.Fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: violations})
	}
	return resp, nil
}

// hitsOf is the descriptor's hits_addend if it has one (0 there checks
// without charging, as envoyproxy/ratelimit's GetHitsAddends has it), else
// the request's, 0 meaning 1.
func hitsOf(req *pb.RateLimitRequest, d *rlv3.RateLimitDescriptor) int64 {
	if h := d.GetHitsAddend(); h != nil {
		return int64(min(h.Value, math.MaxInt64))
	}
	if req.HitsAddend > 0 {
		return int64(req.HitsAddend)
	}
	return 1
}

// limitOf is the descriptor's limit: its override from Envoy's route
// config if it carries one (as envoyproxy/ratelimit, for a known domain),
// else the config's.
func limitOf(dom *config.Domain, d *rlv3.RateLimitDescriptor) *config.Limit {
	if dom == nil {
		return nil
	}
	if o := d.GetLimit(); o != nil {
		u := config.Unit(o.Unit)
		w := u.Duration()
		if m := o.GetUnitMultiplier(); m != nil && m.Value > 1 && w > 0 {
			w *= time.Duration(m.Value)
		}
		path := make([]string, len(d.Entries))
		for i, e := range d.Entries {
			path[i] = e.Key
		}
		l := &config.Limit{RequestsPerUnit: o.RequestsPerUnit, Unit: u, Path: strings.Join(path, ".")}
		if w > 0 && o.RequestsPerUnit > 0 {
			l.Rule = ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: int64(o.RequestsPerUnit), Window: w}
			if l.Rule.Validate() != nil {
				l.Rule = ringlimit.Rule{}
			}
		}
		return l
	}
	es := make([]config.Entry, len(d.Entries))
	for i, e := range d.Entries {
		es[i] = config.Entry{Key: e.Key, Value: e.Value}
	}
	return dom.Lookup(es)
}

// counterKey is the ringlimit key of a descriptor's counter: its domain
// and every entry, with the separators escaped. Each distinct value has
// its own counter, as in envoyproxy/ratelimit.
func counterKey(domain string, es []*rlv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	b.WriteString("rls|")
	esc(&b, domain)
	for _, e := range es {
		b.WriteByte('|')
		esc(&b, e.Key)
		b.WriteByte('=')
		esc(&b, e.Value)
	}
	return b.String()
}

func esc(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '|', '=', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
}
