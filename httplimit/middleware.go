package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/rules"
)

// RuleSource yields the rules in force. Both *rules.Set (fixed rules) and
// *rules.Watcher (rules reloaded from a file) implement it. Current is called
// once per request and must not block.
type RuleSource interface {
	Current() *rules.Set
}

var (
	_ RuleSource = (*rules.Set)(nil)
	_ RuleSource = (*rules.Watcher)(nil)
)

// DeniedFunc handles a request over its limit. The rate-limit headers,
// Retry-After included, are already set on w; d is the denying Decision.
// It may write any response, or queue the request for later and say so.
type DeniedFunc func(w http.ResponseWriter, r *http.Request, d ringlimit.Decision)

// ErrorFunc handles a request the middleware could not decide: a key function
// error (which wraps ErrNoKey, or ringlimit.ErrInvalidKey for a key the
// limiter refused).
type ErrorFunc func(w http.ResponseWriter, r *http.Request, err error)

// Option configures a Middleware.
type Option func(*Middleware)

// WithRule limits every request by one fixed rule, keyed by the key function
// (see WithKey) and prefixed with name. It replaces WithRules. A rule that
// ringlimit.Rule.Validate refuses makes every request a limiter error.
func WithRule(name string, rule ringlimit.Rule) Option {
	return func(m *Middleware) { m.fixed, m.name, m.rule, m.src = true, name, rule, nil }
}

// WithKey sets the key function of the fixed rule (WithRule). If not given,
// the client IP (see WithClientIP). Rules from WithRules carry their own keys.
func WithKey(f KeyFunc) Option { return func(m *Middleware) { m.key = f } }

// WithRules limits each request by the rules of src.Current() that match it,
// each keyed by its own key spec. A request matching no rule passes
// unlimited. It replaces WithRule.
func WithRules(src RuleSource) Option {
	return func(m *Middleware) { m.src, m.fixed = src, false }
}

// WithClientIP says how the client IP is found: trusted proxies and IPv6
// grouping. If not given, the zero ClientIP: RemoteAddr only, IPv6 by /64.
func WithClientIP(c ClientIP) Option { return func(m *Middleware) { m.ip = c } }

// WithDenied replaces Reject, the default handling of a request over its
// limit.
func WithDenied(f DeniedFunc) Option { return func(m *Middleware) { m.denied = f } }

// WithKeyError replaces BadRequest, the default handling of a key error.
func WithKeyError(f ErrorFunc) Option { return func(m *Middleware) { m.keyErr = f } }

// WithFailOpen passes requests on, without rate-limit headers, when the
// limiter fails (a closed limiter, a rule it refuses, a cancelled context).
// Without it they get a bare 500.
func WithFailOpen() Option { return func(m *Middleware) { m.failOpen = true } }

// WithShadow decides and sets the headers as usual (except Retry-After) but
// never blocks or delays a request: one that would have been denied is passed
// on and counted in Stats.WouldDeny. Key and limiter errors pass too. For trying rules out
// on live traffic. A single rule can be a shadow rule (rules.Rule.Shadow)
// instead. The limiter's calls carry ringlimit.WithShadow(ctx) (one
// allocation per request), so that a node counts their denials as
// shadow_denied.
func WithShadow() Option { return func(m *Middleware) { m.shadow = true } }

// WithHeaderStyle chooses the rate-limit headers set on every limited
// response. If not given, HeadersDraft11.
func WithHeaderStyle(s HeaderStyle) Option { return func(m *Middleware) { m.style = s } }

// WithWait queues a request over its limit instead of refusing it, when
// the limiter is a ringlimit.Waiter (every Limiter of this module is) and
// its denial's RetryAfter is at most max: the request waits its turn
// (WaitN, under a context that ends after max or with the request's) and
// is served with the admitting Decision; if the turn does not come within
// max, the denial stands. Each denying rule with one limit waits in turn:
// a rule with several limits (AllowAll, all or nothing) and a shadow rule
// are not queued, and neither is anything with WithShadow.
// Stats.Queued counts the requests served after waiting. If not given,
// or max ≤ 0, nothing waits.
func WithWait(max time.Duration) Option { return func(m *Middleware) { m.wait = max } }

// WithLogger sets where limiter errors are logged. If not given, nowhere.
func WithLogger(l *slog.Logger) Option { return func(m *Middleware) { m.log = l } }

// Middleware is rate-limiting net/http middleware. It is safe for
// simultaneous use; its configuration is fixed by NewMiddleware.
//
// Each request takes one hit from every rule that applies to it, in rule
// order, stopping at the first rule that denies it (so later rules are not
// charged for a request that will not be served; earlier ones were). The
// X-RateLimit-* headers report the most restrictive rule applied: the
// denying one, else the one with the fewest hits remaining. RateLimit-Policy
// and RateLimit list every rule applied.
type Middleware struct {
	limiter  ringlimit.Limiter
	fixed    bool   // WithRule: name, rule and key apply to every request
	name     string // the fixed rule's name
	rule     ringlimit.Rule
	key      KeyFunc
	src      RuleSource
	ip       ClientIP
	denied   DeniedFunc
	keyErr   ErrorFunc
	failOpen bool
	shadow   bool
	wait     time.Duration // WithWait
	style    HeaderStyle
	log      *slog.Logger
	rules    ruleTable // per-rule counters (rulestats.go)

	allowed, deniedN, wouldDeny, keyErrors, limiterErrors, delayExpired, queued atomic.Uint64
}

// Stats are a Middleware's counters, since it was made.
type Stats struct {
	Allowed       uint64 // requests passed on within their limits (or matching no rule)
	Denied        uint64 // requests over a limit, handed to the DeniedFunc
	WouldDeny     uint64 // requests over a limit that were passed on: WithShadow, or denied by shadow rules only
	KeyErrors     uint64 // requests without a usable key
	LimiterErrors uint64 // requests the limiter could not decide (failed open or 500)
	DelayExpired  uint64 // requests whose context ended while waiting out a Delay
	Queued        uint64 // requests over a limit served after waiting their turn (WithWait)
}

// Stats returns the current counters.
func (m *Middleware) Stats() Stats {
	return Stats{
		Allowed:       m.allowed.Load(),
		Denied:        m.deniedN.Load(),
		WouldDeny:     m.wouldDeny.Load(),
		KeyErrors:     m.keyErrors.Load(),
		LimiterErrors: m.limiterErrors.Load(),
		DelayExpired:  m.delayExpired.Load(),
		Queued:        m.queued.Load(),
	}
}

// New returns middleware that limits requests with limiter, configured by
// opts. Shorthand for NewMiddleware(limiter, opts...).Handler.
func New(limiter ringlimit.Limiter, opts ...Option) func(http.Handler) http.Handler {
	return NewMiddleware(limiter, opts...).Handler
}

// NewMiddleware returns a Middleware that limits requests with limiter,
// configured by opts. With neither WithRule nor WithRules, no request matches
// a rule and all pass.
func NewMiddleware(limiter ringlimit.Limiter, opts ...Option) *Middleware {
	m := &Middleware{limiter: limiter, denied: Reject, keyErr: BadRequest}
	for _, o := range opts {
		o(m)
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m
}

// Handler wraps next.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// applied is one rule's decision on a request.
type applied struct {
	name   string // in the headers: the rule's name, "name#i" for its i'th limit
	rule   ringlimit.Rule
	d      ringlimit.Decision
	shadow bool // a shadow rule: its denial does not block
	// of is, on the first of a rule's limits, how many limits the rule
	// applied (1 for a rule with one limit); 0 on the others. A rule counts
	// once in the per-rule stats, by its binding limit.
	of int
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	var abuf [4]applied
	res := abuf[:0]
	ctx := r.Context()
	if m.fixed {
		key, err := m.fixedKey(r)
		if err != nil {
			m.keyError(w, r, next, err)
			return
		}
		lctx := ctx
		if m.shadow {
			lctx = ringlimit.WithShadow(ctx)
		}
		d, err := m.limiter.AllowN(lctx, key, m.rule, 1)
		if err != nil {
			m.limiterError(w, r, next, err)
			return
		}
		if !d.Allowed && !m.shadow {
			d = m.queue(ctx, key, m.rule, d)
		}
		res = append(res, applied{name: m.name, rule: m.rule, d: d, of: 1})
	} else if m.src != nil {
		var sctx context.Context // ctx marked as shadow, made on first use
		var mbuf [4]*rules.Rule
		for _, rl := range m.src.Current().AppendMatch(mbuf[:0], r) {
			lctx := ctx
			if rl.Shadow || m.shadow {
				if sctx == nil {
					sctx = ringlimit.WithShadow(ctx)
				}
				lctx = sctx
			}
			var denied bool
			var err error
			if res, denied, err = m.applyRule(lctx, r, rl, res); err != nil {
				m.count(res) // the rules decided before it
				if errors.Is(err, ErrNoKey) {
					m.keyError(w, r, next, err)
				} else {
					m.limiterError(w, r, next, err)
				}
				return
			}
			if denied && !rl.Shadow {
				break
			}
		}
	}
	if len(res) == 0 {
		m.allowed.Add(1)
		next.ServeHTTP(w, r)
		return
	}

	m.count(res)
	top := mostRestrictive(res)
	blocked := !res[top].d.Allowed && !res[top].shadow && !m.shadow
	setHeaders(w.Header(), res, top, blocked, m.style)
	if blocked {
		m.deniedN.Add(1)
		m.denied(w, r, res[top].d)
		return
	}
	var delay time.Duration
	wouldDeny := false
	for _, a := range res {
		wouldDeny = wouldDeny || !a.d.Allowed
		if !a.shadow {
			delay = max(delay, a.d.Delay)
		}
	}
	if delay > 0 && !m.shadow && !wait(ctx, delay) {
		m.delayExpired.Add(1)
		h := w.Header()
		h["Retry-After"] = []string{strconv.FormatInt(ceilSeconds(delay), 10)}
		http.Error(w, "request deadline too short for the rate limit's delay", http.StatusServiceUnavailable)
		return
	}
	if wouldDeny {
		m.wouldDeny.Add(1)
	} else {
		m.allowed.Add(1)
	}
	next.ServeHTTP(w, r)
}

// queue waits for a hit on key under rule, denied by d, if WithWait allows
// it (see there), and returns the admitting Decision; else, or if the turn
// does not come in time, d.
func (m *Middleware) queue(ctx context.Context, key string, rule ringlimit.Rule, d ringlimit.Decision) ringlimit.Decision {
	w, ok := m.limiter.(ringlimit.Waiter)
	if m.wait <= 0 || !ok || d.RetryAfter > m.wait {
		return d
	}
	wctx, cancel := context.WithTimeout(ctx, m.wait)
	defer cancel()
	wd, err := w.WaitN(wctx, key, rule, 1)
	if err != nil {
		return d
	}
	m.queued.Add(1)
	return wd
}

// wait waits d, or until ctx is done if that is sooner (at once if ctx's
// deadline is already too close). It reports whether d was waited out.
func wait(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// mostRestrictive is the index of the binding decision, as
// ringlimit.Binding chooses it: the denial with the longest RetryAfter (one
// that blocks, of a rule that is not a shadow rule, before a shadow rule's),
// or else the decision with the fewest hits remaining; the longest reset,
// then the first, breaks ties.
func mostRestrictive(res []applied) int {
	top := -1
	for i := range res {
		a := &res[i]
		if a.d.Allowed {
			continue
		}
		if top < 0 || res[top].shadow && !a.shadow ||
			res[top].shadow == a.shadow && a.d.RetryAfter > res[top].d.RetryAfter {
			top = i
		}
	}
	if top >= 0 {
		return top
	}
	top = 0
	for i := 1; i < len(res); i++ {
		a, b := res[i].d, res[top].d
		if a.Remaining < b.Remaining || a.Remaining == b.Remaining && a.ResetAfter > b.ResetAfter {
			top = i
		}
	}
	return top
}

func (m *Middleware) keyError(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	m.keyErrors.Add(1)
	if m.shadow {
		next.ServeHTTP(w, r)
		return
	}
	m.keyErr(w, r, err)
}

func (m *Middleware) limiterError(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
	if errors.Is(err, ringlimit.ErrInvalidKey) {
		m.keyError(w, r, next, err)
		return
	}
	m.limiterErrors.Add(1)
	m.log.LogAttrs(r.Context(), slog.LevelError, "httplimit: limiter failed",
		slog.String("err", err.Error()), slog.Bool("fail_open", m.failOpen || m.shadow))
	if m.failOpen || m.shadow {
		next.ServeHTTP(w, r)
		return
	}
	http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
}

// Reject is the default DeniedFunc: 429 Too Many Requests with a small JSON
// body, {"error":"rate limit exceeded","retry_after":N}, N in whole seconds
// as in Retry-After.
func Reject(w http.ResponseWriter, _ *http.Request, d ringlimit.Decision) {
	b := make([]byte, 0, 64)
	b = append(b, `{"error":"rate limit exceeded","retry_after":`...)
	b = strconv.AppendInt(b, retryAfterSeconds(d.RetryAfter), 10)
	b = append(b, "}\n"...)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(b)
}

// BadRequest is the default ErrorFunc for key errors: 400 with a generic
// text body that reveals nothing of the error.
func BadRequest(w http.ResponseWriter, _ *http.Request, _ error) {
	http.Error(w, "bad request: cannot identify the client for rate limiting", http.StatusBadRequest)
}
