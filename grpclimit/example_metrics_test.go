package grpclimit_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/local"
)

func ExampleRegister() {
	limit := grpclimit.New(local.New(local.Config{}),
		grpclimit.WithRule("api", ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 100, Window: time.Minute}))
	reg := prometheus.NewRegistry() // served with promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if err := grpclimit.Register(reg, limit); err != nil {
		fmt.Println(err)
		return
	}
	fams, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range fams {
		fmt.Println(f.GetName())
	}
	// Output:
	// ringlimit_grpc_delay_expired_total
	// ringlimit_grpc_key_errors_total
	// ringlimit_grpc_limiter_errors_total
	// ringlimit_grpc_near_limit_total
	// ringlimit_grpc_requests_total
}
