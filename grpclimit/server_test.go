package grpclimit_test

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/rules"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

var perMinute = func(n int64) ringlimit.Rule {
	return ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: n, Window: time.Minute}
}

func TestUnaryDenialCarriesTrailers(t *testing.T) {
	lim := grpclimit.New(local.New(local.Config{}), grpclimit.WithRule("api", perMinute(2)))
	s := serve(t, lim.Unary(), lim.Stream())
	c := s.client(t)
	for i := range 2 {
		hdr, _, err := check(t, c)
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if got, want := first(hdr, "x-ratelimit-remaining"), strconv.Itoa(1-i); got != want {
			t.Errorf("call %d: x-ratelimit-remaining %q, want %q", i+1, got, want)
		}
		if got := first(hdr, "ratelimit-policy"); got != `"api";q=2;w=60` {
			t.Errorf("call %d: ratelimit-policy %q", i+1, got)
		}
	}
	_, trl, err := check(t, c)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", err)
	}
	retry := first(trl, "retry-after")
	if n, err := strconv.Atoi(retry); err != nil || n < 1 || n > 60 {
		t.Errorf("retry-after %q, want 1..60 seconds", retry)
	}
	// t equals Retry-After on a denial, as httplimit sends it.
	if got, want := first(trl, "ratelimit"), `"api";r=0;t=`+retry; got != want {
		t.Errorf("ratelimit %q, want %q", got, want)
	}
	if got := first(trl, "ratelimit-policy"); got != `"api";q=2;w=60` {
		t.Errorf("ratelimit-policy %q", got)
	}
	if got := first(trl, "x-ratelimit-remaining"); got != "0" {
		t.Errorf("x-ratelimit-remaining %q, want 0", got)
	}
	if n := s.handled.Load(); n != 2 {
		t.Errorf("%d handlers ran, want 2: a refused call's handler must not run", n)
	}
	if st := lim.Stats(); st.Allowed != 2 || st.Denied != 1 {
		t.Errorf("stats %+v, want 2 allowed, 1 denied", st)
	}
}

func TestStreamDenialCarriesTrailers(t *testing.T) {
	lim := grpclimit.New(local.New(local.Config{}), grpclimit.WithRule("watch", perMinute(1)))
	s := serve(t, lim.Unary(), lim.Stream())
	c := s.client(t)

	ctx, cancel := context.WithCancel(t.Context())
	st, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	hdr, err := st.Header()
	if err != nil || first(hdr, "x-ratelimit-remaining") != "0" {
		t.Errorf("first stream's header %v (%v), want x-ratelimit-remaining 0", hdr, err)
	}
	cancel()

	st, err = c.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
	trl := st.Trailer()
	if first(trl, "retry-after") == "" || !strings.HasPrefix(first(trl, "ratelimit"), `"watch";r=0;t=`) {
		t.Errorf("second stream's trailer %v lacks the rate-limit fields", trl)
	}
	if n := s.handled.Load(); n != 1 {
		t.Errorf("%d stream handlers ran, want 1", n)
	}
}

// TestKeys runs each key function against the same server: the calls of
// "a" use up their budget, and the call of "b" passes only if its key
// differs.
func TestKeys(t *testing.T) {
	const checkM, listM = "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/List"
	tests := []struct {
		name      string
		key       grpclimit.KeyFunc
		a, b      []string // metadata of each call
		bMethod   string
		separate  bool // b has its own budget
		wantNoKey bool // a call without the metadata is refused
	}{
		{name: "metadata", key: grpclimit.Metadata("X-Api-Key"), a: []string{"x-api-key", "k1"}, b: []string{"x-api-key", "k2"}, separate: true, wantNoKey: true},
		{name: "metadata same", key: grpclimit.Metadata("x-api-key"), a: []string{"x-api-key", "k1"}, b: []string{"x-api-key", "k1"}},
		{name: "peer", key: grpclimit.PeerAddr, a: []string{"x-api-key", "k1"}, b: []string{"x-api-key", "k2"}},
		{name: "default is the peer", a: []string{"x-api-key", "k1"}, b: []string{"x-api-key", "k2"}},
		{name: "method", key: grpclimit.Method, bMethod: listM, separate: true},
		{name: "method same", key: grpclimit.Method, bMethod: checkM},
		{name: "compose", key: grpclimit.Compose(grpclimit.PeerAddr, grpclimit.Metadata("x-api-key")), a: []string{"x-api-key", "k1"}, b: []string{"x-api-key", "k2"}, separate: true, wantNoKey: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []grpclimit.Option{grpclimit.WithRule("k", perMinute(1))}
			if tt.key != nil {
				opts = append(opts, grpclimit.WithKey(tt.key))
			}
			lim := grpclimit.New(local.New(local.Config{}), opts...)
			c := serve(t, lim.Unary(), lim.Stream()).client(t)
			if _, _, err := check(t, c, tt.a...); err != nil {
				t.Fatalf("a's first call: %v", err)
			}
			if _, _, err := check(t, c, tt.a...); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("a's second call: %v, want ResourceExhausted", err)
			}
			var err error
			if tt.bMethod == listM {
				_, err = c.List(t.Context(), &healthpb.HealthListRequest{})
			} else {
				_, _, err = check(t, c, tt.b...)
			}
			if tt.separate && err != nil {
				t.Errorf("b's call: %v, want its own budget", err)
			}
			if !tt.separate && status.Code(err) != codes.ResourceExhausted {
				t.Errorf("b's call: %v, want a's budget (ResourceExhausted)", err)
			}
			if tt.wantNoKey {
				if _, _, err := check(t, c); status.Code(err) != codes.InvalidArgument {
					t.Errorf("a call without the key: %v, want InvalidArgument", err)
				}
				if st := lim.Stats(); st.KeyErrors != 1 {
					t.Errorf("stats %+v, want 1 key error", st)
				}
			}
		})
	}
}

// TestRulesFromYAML limits calls by the rules of a file in httplimit's
// format: paths are full methods.
func TestRulesFromYAML(t *testing.T) {
	set, err := rules.Parse([]byte(`
rules:
  - name: check
    match: {path: /grpc.health.v1.Health/Check}
    key: header:x-tenant
    limit: 1
    window: 60s
  - name: health
    match: {path: /grpc.health.v1.Health/}
    key: route
    limit: 3
    window: 60s
  - name: never
    match: {path: /other.Service/}
    limit: 1
    window: 60s
`))
	if err != nil {
		t.Fatal(err)
	}
	lim := grpclimit.New(local.New(local.Config{}), grpclimit.WithRules(set))
	s := serve(t, lim.Unary(), lim.Stream())
	c := s.client(t)

	hdr, _, err := check(t, c, "x-tenant", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got := first(hdr, "ratelimit-policy"); got != `"check";q=1;w=60, "health";q=3;w=60` {
		t.Errorf("ratelimit-policy %q, want both matching rules", got)
	}
	if _, trl, err := check(t, c, "x-tenant", "t1"); status.Code(err) != codes.ResourceExhausted || !strings.HasPrefix(first(trl, "ratelimit"), `"check";`) {
		t.Errorf("t1's second call: %v, trailer %v; want check's denial", err, trl)
	}
	if _, _, err := check(t, c, "x-tenant", "t2"); err != nil {
		t.Errorf("t2's call: %v, want its own budget", err)
	}
	// health is keyed by the method: Check has taken 2 of its 3 hits (the
	// denied call took none of health's: rules after a denial are not
	// charged), so one List passes and the next is refused by health.
	if _, err := c.List(t.Context(), &healthpb.HealthListRequest{}); err != nil {
		t.Errorf("first List: %v", err)
	}
	if _, _, err := check(t, c, "x-tenant", "t3"); err != nil {
		t.Errorf("t3's call: %v, want Check's own health budget", err)
	}
	if _, _, err := check(t, c, "x-tenant", "t4"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("t4's call: %v, want health's denial: Check has used 3", err)
	}
	if _, _, err := check(t, c); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a call without x-tenant: %v, want InvalidArgument", err)
	}
}

func TestClientIPTrustsProxies(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		t.Run("trusted="+strconv.FormatBool(trusted), func(t *testing.T) {
			opts := []grpclimit.Option{grpclimit.WithRule("ip", perMinute(1))}
			if trusted {
				opts = append(opts, grpclimit.WithClientIP(httplimit.ClientIP{
					TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
				}))
			}
			lim := grpclimit.New(local.New(local.Config{}), opts...)
			c := serve(t, lim.Unary(), nil).client(t)
			if _, _, err := check(t, c, "x-forwarded-for", "192.0.2.1"); err != nil {
				t.Fatal(err)
			}
			_, _, err := check(t, c, "x-forwarded-for", "192.0.2.2")
			if trusted && err != nil {
				t.Errorf("another forwarded client behind a trusted proxy: %v, want its own budget", err)
			}
			if !trusted && status.Code(err) != codes.ResourceExhausted {
				t.Errorf("x-forwarded-for from an untrusted peer: %v, want the peer's budget", err)
			}
		})
	}
}

// failing is a Limiter that fails every call with err.
type failing struct{ err error }

func (f failing) AllowN(context.Context, string, ringlimit.Rule, int64) (ringlimit.Decision, error) {
	return ringlimit.Decision{}, f.err
}

func (f failing) Peek(context.Context, string, ringlimit.Rule) (ringlimit.Decision, error) {
	return ringlimit.Decision{}, f.err
}
func (f failing) Reset(context.Context, string) error { return f.err }

// TestBadInput: limiter failures, a rule the limiter refuses and a key it
// refuses each end the call without running it, with a status that reveals
// nothing; WithFailOpen lets limiter failures through.
func TestBadInput(t *testing.T) {
	long := func(context.Context, string) (string, error) { return strings.Repeat("k", ringlimit.MaxKeyLen+1), nil }
	five := grpclimit.WithRule("r", perMinute(5))
	tests := []struct {
		name    string
		limiter ringlimit.Limiter
		opts    []grpclimit.Option
		want    codes.Code
	}{
		{"closed limiter", failing{ringlimit.ErrClosed}, []grpclimit.Option{five}, codes.Unavailable},
		{"closed limiter, fail open", failing{ringlimit.ErrClosed}, []grpclimit.Option{five, grpclimit.WithFailOpen()}, codes.OK},
		{"invalid rule", local.New(local.Config{}), []grpclimit.Option{grpclimit.WithRule("bad", ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 0, Window: time.Second})}, codes.Unavailable},
		{"key too long", local.New(local.Config{}), []grpclimit.Option{five, grpclimit.WithKey(long)}, codes.InvalidArgument},
		{"key function error", local.New(local.Config{}), []grpclimit.Option{five, grpclimit.WithKey(func(context.Context, string) (string, error) { return "", errors.New("secret detail") })}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := grpclimit.New(tt.limiter, tt.opts...)
			s := serve(t, lim.Unary(), lim.Stream())
			_, _, err := check(t, s.client(t))
			if status.Code(err) != tt.want {
				t.Fatalf("call: %v, want %v", err, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), "secret detail") || strings.Contains(err.Error(), "ringlimit:")) {
				t.Errorf("status %q reveals the underlying error", err)
			}
			wantHandled := int64(0)
			if tt.want == codes.OK {
				wantHandled = 1
			}
			if n := s.handled.Load(); n != wantHandled {
				t.Errorf("%d handlers ran, want %d", n, wantHandled)
			}
		})
	}
}

// TestLeakyBucketDelay: a leaky bucket's Delay is waited out before the
// handler runs, and a call whose deadline is too close to wait it out is
// refused with retry-after.
func TestLeakyBucketDelay(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 1, Window: time.Hour, Burst: 2}
	lim := grpclimit.New(local.New(local.Config{}), grpclimit.WithRule("leaky", rule))
	s := serve(t, lim.Unary(), nil)
	c := s.client(t)
	if _, _, err := check(t, c); err != nil {
		t.Fatal(err)
	}
	// The second call is admitted with a Delay of an hour; its deadline of a
	// minute cannot cover that.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var trl metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trl))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("delayed call: %v, want ResourceExhausted", err)
	}
	if first(trl, "retry-after") != "3600" {
		t.Errorf("delayed call's trailer %v, want retry-after 3600", trl)
	}
	if n := s.handled.Load(); n != 1 {
		t.Errorf("%d handlers ran, want 1", n)
	}
	if st := lim.Stats(); st.DelayExpired != 1 {
		t.Errorf("stats %+v, want 1 expired delay", st)
	}
}
