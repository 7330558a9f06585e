package grpclimit_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/local"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// BenchmarkUnary is the server interceptor's cost per admitted call, over
// a handler that does nothing and without a network: building the request
// that stands for the call, the middleware's decision on a local limiter,
// and the rate-limit fields. Keys rotate over 1,000 API keys.
func BenchmarkUnary(b *testing.B) {
	lim := grpclimit.New(local.New(local.Config{}),
		grpclimit.WithRule("api", ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1 << 40, Window: time.Second}),
		grpclimit.WithKey(grpclimit.Metadata("x-api-key")))
	unary := lim.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.Orders/Get"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	ctxs := make([]context.Context, 1000)
	for i := range ctxs {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "key-"+strconv.Itoa(i), "user-agent", "grpc-go/1.85.0"))
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 5000}})
		ctxs[i] = grpc.NewContextWithServerTransportStream(ctx, nopStream{})
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if _, err := unary(ctxs[i%len(ctxs)], nil, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// nopStream is the server transport stream of a call without a network: it
// takes the header metadata and drops it.
type nopStream struct{}

func (nopStream) Method() string               { return "/shop.Orders/Get" }
func (nopStream) SetHeader(metadata.MD) error  { return nil }
func (nopStream) SendHeader(metadata.MD) error { return nil }
func (nopStream) SetTrailer(metadata.MD) error { return nil }
