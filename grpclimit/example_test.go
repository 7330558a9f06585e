package grpclimit_test

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/rules"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func Example() {
	// The same YAML as httplimit's: a path is a full method, header:NAME is
	// the metadata NAME, and ip the peer's address.
	set, err := rules.Parse([]byte(`
rules:
  - name: orders
    match: {path: /shop.Orders/}
    key: header:x-api-key
    limit: 100
    window: 60s
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	limit := grpclimit.New(local.New(local.Config{}), grpclimit.WithRules(set))
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limit.Unary()),
		grpc.ChainStreamInterceptor(limit.Stream()))
	defer srv.Stop()
	// Register the services and Serve. A call over its limit ends with
	// codes.ResourceExhausted, and the RateLimit fields in its trailers.
}

func ExampleUnaryClientInterceptor() {
	var fleet grpclimit.Waiter // a cluster's node: it has WaitN
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 50, Window: time.Second}
	conn, err := grpc.NewClient("orders.internal:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(fleet, "orders-out", rule, nil)),
		grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(fleet, "orders-out", rule, nil)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	// Each call now waits for its method's share of 50 calls a second
	// across every client that waits on the same fleet and key.
}
