// Command ringlimitd is a ringlimit cluster as a rate-limit service: each
// process is one node, and answers Envoy's rate-limit service, v3
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on -grpc,
// and the same request as JSON on -http (POST /json), with the limits of
// an envoyproxy/ratelimit YAML config (-config, reloaded when it
// changes). See docs/ringlimitd.md.
//
//	GET  /healthz  200 while the process runs
//	GET  /readyz   200 once the node has joined its cluster and holds a config
//	GET  /metrics  Prometheus text: the node's ringlimit_ series and ringlimitd_ ones
//	POST /json     a RateLimitRequest as protojson; answers a RateLimitResponse
//
// With no arguments it is a lone node with an empty config: every
// descriptor is unmatched and allowed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/ringlimit/ringlimit"
)

func main() {
	o, err := parseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err == nil && o.version {
		fmt.Println("ringlimitd", ringlimit.Version)
		return
	}
	if err == nil {
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ringlimitd:", err)
		os.Exit(1)
	}
}
