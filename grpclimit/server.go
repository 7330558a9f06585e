package grpclimit

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Option configures an Interceptor.
type Option func(*[]httplimit.Option)

func opt(o httplimit.Option) Option { return func(os *[]httplimit.Option) { *os = append(*os, o) } }

// WithRule limits every call by one fixed rule, keyed by the key function
// (see WithKey) and prefixed with name. It replaces WithRules.
func WithRule(name string, rule ringlimit.Rule) Option { return opt(httplimit.WithRule(name, rule)) }

// WithKey sets the key function of the fixed rule (WithRule). If not given,
// the peer's address as WithClientIP says. Rules from WithRules carry their
// own keys.
func WithKey(f KeyFunc) Option { return opt(httplimit.WithKey(httpKey(f))) }

// WithRules limits each call by the rules of src.Current() that match it (a
// *rules.Set, or a *rules.Watcher to reload the file while serving), each
// keyed by its own key spec. A call matching no rule passes unlimited. It
// replaces WithRule.
func WithRules(src httplimit.RuleSource) Option { return opt(httplimit.WithRules(src)) }

// WithClientIP says how the client's address is found for the default key
// and for the ip key spec: the peer's address, or, when the peer is one of
// c's trusted proxies, the x-forwarded-for metadata it sent. If not given,
// the zero ClientIP: the peer only, IPv6 by /64.
func WithClientIP(c httplimit.ClientIP) Option { return opt(httplimit.WithClientIP(c)) }

// WithFailOpen passes calls on when the limiter fails (a closed limiter, a
// rule it refuses). Without it they end with codes.Unavailable.
func WithFailOpen() Option { return opt(httplimit.WithFailOpen()) }

// WithShadow decides and sends the rate-limit fields as usual but never
// refuses a call; see httplimit.WithShadow.
func WithShadow() Option { return opt(httplimit.WithShadow()) }

// WithLogger sets where limiter errors are logged. If not given, nowhere.
func WithLogger(l *slog.Logger) Option { return opt(httplimit.WithLogger(l)) }

// Interceptor is a gRPC server's rate limiter: Unary and Stream return its
// interceptors. It decides a call with an httplimit.Middleware, on a request
// that stands for the call (see the package doc), so rules, overrides,
// several limits, shadow rules and statistics behave as they do for HTTP.
// It is safe for simultaneous use.
type Interceptor struct {
	mw   *httplimit.Middleware
	pass http.Handler
}

// New returns an Interceptor that limits calls with limiter, configured by
// opts. With neither WithRule nor WithRules, every call passes.
func New(limiter ringlimit.Limiter, opts ...Option) *Interceptor {
	var hopts []httplimit.Option
	for _, o := range opts {
		o(&hopts)
	}
	hopts = append(hopts,
		httplimit.WithHeaderStyle(httplimit.HeadersDraft11),
		httplimit.WithDenied(func(w http.ResponseWriter, _ *http.Request, d ringlimit.Decision) {
			o := w.(*outcome)
			o.denied, o.retry = true, d.RetryAfter
		}),
		httplimit.WithKeyError(func(w http.ResponseWriter, _ *http.Request, _ error) {
			w.(*outcome).noKey = true
		}))
	mw := httplimit.NewMiddleware(limiter, hopts...)
	return &Interceptor{
		mw:   mw,
		pass: mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.(*outcome).passed = true })),
	}
}

// Stats returns the counters of the calls decided so far, as
// httplimit.Middleware counts requests.
func (i *Interceptor) Stats() httplimit.Stats { return i.mw.Stats() }

// Unary returns the interceptor for unary methods: a refused call's handler
// never runs.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, err := i.decide(ctx, info.FullMethod)
		if err != nil {
			if len(md) > 0 {
				grpc.SetTrailer(ctx, md) // fails only on a stream gone: the status is lost too
			}
			return nil, err
		}
		if len(md) > 0 {
			grpc.SetHeader(ctx, md)
		}
		return handler(ctx, req)
	}
}

// Stream returns the interceptor for streaming methods: a stream takes one
// hit when it opens, whatever it sends afterwards; a refused stream's handler
// never runs.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, err := i.decide(ss.Context(), info.FullMethod)
		if err != nil {
			if len(md) > 0 {
				ss.SetTrailer(md)
			}
			return err
		}
		if len(md) > 0 {
			ss.SetHeader(md)
		}
		return handler(srv, ss)
	}
}

// decide runs the middleware on the call's request. It returns the
// rate-limit fields to send, and the status error of a call that must not
// run.
func (i *Interceptor) decide(ctx context.Context, fullMethod string) (metadata.MD, error) {
	o := outcome{h: make(http.Header, 8)}
	i.pass.ServeHTTP(&o, request(ctx, fullMethod))
	md := fields(o.h)
	switch {
	case o.passed:
		return md, nil
	case o.denied:
		return md, exhausted(o.retry)
	case o.noKey:
		return nil, status.Error(codes.InvalidArgument, "cannot identify the client for rate limiting")
	case o.code == http.StatusServiceUnavailable: // a leaky bucket's delay outlasted the call's deadline
		return md, status.Error(codes.ResourceExhausted, "call deadline too short for the rate limit's delay")
	default: // the limiter failed (a 500)
		return nil, status.Error(codes.Unavailable, "rate limiter unavailable")
	}
}

// exhausted is the status of a call over its limit: ResourceExhausted with
// a google.rpc.RetryInfo detail whose retry_delay is when the call could
// next pass (the denying decision's RetryAfter), which gRPC clients and
// retry policies read. The same time is in the retry-after trailer, in
// whole seconds.
func exhausted(retry time.Duration) error {
	st := status.New(codes.ResourceExhausted, "rate limit exceeded")
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(max(retry, 0))}); err == nil {
		st = withInfo
	}
	return st.Err()
}

// fieldNames are the headers httplimit sets that go into metadata: their
// canonical names, and their names in metadata (lower case).
var fieldNames = [...][2]string{
	{"X-Ratelimit-Limit", "x-ratelimit-limit"},
	{"X-Ratelimit-Remaining", "x-ratelimit-remaining"},
	{"X-Ratelimit-Reset", "x-ratelimit-reset"},
	{"Ratelimit-Policy", "ratelimit-policy"},
	{"Ratelimit", "ratelimit"},
	{"Retry-After", "retry-after"},
	{"X-Ratelimit-Retry-After", "x-ratelimit-retry-after"},
}

// fields copies the rate-limit headers of h into metadata.
func fields(h http.Header) metadata.MD {
	var md metadata.MD
	for _, name := range fieldNames {
		if vs := h[name[0]]; len(vs) > 0 {
			if md == nil {
				md = make(metadata.MD, len(fieldNames))
			}
			md[name[1]] = vs
		}
	}
	return md
}

// outcome is the http.ResponseWriter the middleware answers a call's
// request on: it records what the middleware decided instead of writing a
// response.
type outcome struct {
	h                     http.Header
	code                  int
	passed, denied, noKey bool
	retry                 time.Duration // a denial's RetryAfter
}

func (o *outcome) Header() http.Header { return o.h }

func (o *outcome) Write(b []byte) (int, error) {
	if o.code == 0 {
		o.code = http.StatusOK
	}
	return len(b), nil
}

func (o *outcome) WriteHeader(code int) {
	if o.code == 0 {
		o.code = code
	}
}
