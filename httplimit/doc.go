// Package httplimit is net/http middleware that rate-limits requests with any
// ringlimit.Limiter.
//
// Each request is checked against one fixed rule (WithRule) or against the
// rules of a rules.Set that match it (WithRules; a *rules.Watcher keeps the
// set current while the server runs). A rule's hits are counted per key: the
// client IP (ClientIP: RemoteAddr, or X-Forwarded-For behind trusted
// proxies; IPv6 grouped by prefix), a header, the route pattern, or a
// combination. Keys are prefixed with the rule's name, so one client's hits
// on two rules never share state.
//
// Every decided response carries the rate-limit headers:
//
//	X-RateLimit-Limit: 5
//	X-RateLimit-Remaining: 4
//	X-RateLimit-Reset: 60
//	RateLimit-Policy: "posts";q=5;w=60
//	RateLimit: "posts";r=4;t=60
//
// the last two per draft-ietf-httpapi-ratelimit-headers-11 (draft 10's
// syntax). A request over its limit gets 429 Too Many Requests, a small JSON
// body and Retry-After (in whole seconds, rounded up, at least 1), and its
// RateLimit's t is that same value, so Retry-After is never earlier than the
// end of the effective window; unless WithDenied hands it to another handler
// (to queue it, say). A LeakyBucket admission's Delay is
// waited out before the handler runs; if the request's context ends first
// (or its deadline is too close to wait), the answer is 503 and the handler
// never runs.
//
// Failures never panic and never reveal internals: a request without a usable
// key gets 400 (WithKeyError changes that), and one the limiter cannot decide
// (ringlimit.ErrClosed, say) gets a bare 500, or passes unlimited with
// WithFailOpen. WithShadow decides and sets headers but never blocks, and
// counts in Stats what it would have blocked; a rule with Shadow set (shadow:
// true in YAML) does the same for that rule alone, and the rules after it
// still apply. RuleStats counts each rule's decisions (package metrics
// exports them).
//
// The package keeps no global state: build as many Middlewares as you like.
//
// WithWait queues a request over its limit for up to a given time instead
// of refusing it; Transport is the other direction, an http.RoundTripper
// that waits for a hit on a ringlimit.Waiter before each request it sends:
// the fleet-wide client throttle. It waits at most its MaxWait
// (DefaultMaxWait, 30 s, unless set), and counts each host under one key
// however its URL spells it (HostKey).
package httplimit
