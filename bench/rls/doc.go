// Package rls measures ringlimitd beside envoyproxy/ratelimit, the
// reference server of Envoy's rate-limit protocol: the same
// ShouldRateLimit calls, the same config, against the same Redis, three
// instances of each on loopback, at 1 and 32 callers. It is a module of
// its own so that neither server's dependencies reach the others'.
//
//	RINGLIMIT_RLS=1 go test -run Versus -v -timeout 30m
//
// builds both servers (envoyproxy/ratelimit from its module,
// github.com/envoyproxy/ratelimit at the version below, through the Go
// module proxy), starts a redis-server (or valkey-server) on a free port,
// and prints for each server and caller count the decisions per second,
// p50 and p99, and whether the calls of an exactness round, spread over the
// three instances, admitted exactly the limit.
package rls
