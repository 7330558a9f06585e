// Package grpclimit rate-limits gRPC calls with any ringlimit.Limiter: server
// interceptors that refuse calls over their limit, and client interceptors
// that wait for the fleet's limit before each call.
//
// It is a module of its own, so that the ringlimit module never imports grpc.
//
// # Server
//
// An Interceptor decides each call (each stream, for a streaming method)
// before its handler runs, exactly as an httplimit.Middleware decides a
// request: one fixed rule (WithRule), or the rules of a rules.Set that match
// the call (WithRules, the same YAML as httplimit's). A call stands for an
// HTTP request whose method is POST, whose path is the call's full method
// ("/pkg.Service/Method") and whose headers are the call's metadata, so a
// rule's match.path matches full methods ("/pkg.Service/" for a whole
// service), and its key spec reads:
//
//	ip           the peer's address (the x-forwarded-for metadata of trusted proxies, see WithClientIP)
//	header:NAME  the first value of the metadata NAME
//	route        the full method
//
// A call over its limit ends with codes.ResourceExhausted with a
// google.rpc.RetryInfo detail (errdetails.RetryInfo: retry_delay, when the
// call could next pass), which gRPC clients and retry policies read, and its
// trailers carry the rate-limit fields that httplimit sends as headers, under
// the same names in lower case:
//
//	ratelimit-policy: "name";q=5;w=60
//	ratelimit: "name";r=0;t=12
//	retry-after: 12
//	x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset, x-ratelimit-retry-after
//
// An admitted call gets the same fields (less retry-after) in its response
// header metadata. A call without a usable key ends with
// codes.InvalidArgument, and one that the limiter cannot decide
// (ringlimit.ErrClosed, say) with codes.Unavailable, or passes with
// WithFailOpen. Neither status reveals the underlying error.
//
// # Metrics
//
// Register exports an Interceptor's counters to Prometheus, as package
// metrics exports an httplimit.Middleware's, under ringlimit_grpc_ names:
// ringlimit_grpc_requests_total{rule,result} and
// ringlimit_grpc_near_limit_total{rule} per rule, and the calls without a
// key, those the limiter could not decide, and those whose deadline ended
// in a leaky bucket's delay. The node's series come from metrics.Register.
//
// # Client
//
// UnaryClientInterceptor and StreamClientInterceptor call a Waiter's WaitN
// before each call, so that a client of a fleet sends no faster than the
// fleet's limit allows, instead of being refused. A call waits for its
// turn as long as its context allows and at most DefaultMaxWait (30 s;
// WithMaxWait sets another bound, or none): a turn further off fails at
// once, consuming nothing.
package grpclimit
