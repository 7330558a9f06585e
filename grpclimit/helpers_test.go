package grpclimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// server is a real gRPC server with the health service on a loopback port,
// its calls passing through the interceptors under test and then through a
// counter of the calls whose handler ran.
type server struct {
	addr    string
	handled atomic.Int64
}

func serve(t *testing.T, unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor) *server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: lis.Addr().String()}
	var us []grpc.UnaryServerInterceptor
	var ss []grpc.StreamServerInterceptor
	if unary != nil {
		us = append(us, unary)
	}
	if stream != nil {
		ss = append(ss, stream)
	}
	us = append(us, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s.handled.Add(1)
		return h(ctx, req)
	})
	ss = append(ss, func(srv any, st grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		s.handled.Add(1)
		return h(srv, st)
	})
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(us...), grpc.ChainStreamInterceptor(ss...))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return s
}

// client dials s with the given options and returns a health client.
func (s *server) client(t *testing.T, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient(s.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// check makes one Check call carrying the metadata kv, and returns its
// header, trailer and error.
func check(t *testing.T, c healthpb.HealthClient, kv ...string) (metadata.MD, metadata.MD, error) {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), kv...)
	var hdr, trl metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	return hdr, trl, err
}

func first(md metadata.MD, k string) string {
	if vs := md.Get(k); len(vs) > 0 {
		return vs[0]
	}
	return ""
}
