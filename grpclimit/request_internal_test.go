package grpclimit

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func incoming(md metadata.MD, addr net.Addr) context.Context {
	ctx := metadata.NewIncomingContext(context.Background(), md)
	if addr != nil {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
	}
	return ctx
}

// TestRequest: the request that stands for a call carries its method, its
// text metadata and its peer, and nothing else of the call.
func TestRequest(t *testing.T) {
	ctx := incoming(metadata.MD{
		":authority": {"example"},
		"token-bin":  {"\x00\x01"},
		"x-api-key":  {"k1", "k2"},
	}, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 5000})
	r := request(ctx, "/pkg.Svc/Do")
	if r.Method != "POST" || r.URL.Path != "/pkg.Svc/Do" || r.RemoteAddr != "192.0.2.7:5000" {
		t.Errorf("request %s %s from %s", r.Method, r.URL.Path, r.RemoteAddr)
	}
	if len(r.Header) != 1 || r.Header.Get("X-Api-Key") != "k1" {
		t.Errorf("headers %v, want X-Api-Key alone", r.Header)
	}
	if r.Context() != ctx {
		t.Error("the request does not carry the call's context")
	}
	if r := request(context.Background(), "/pkg.Svc/Do"); r.RemoteAddr != "" || len(r.Header) != 0 {
		t.Errorf("a call without metadata or peer: %v from %q", r.Header, r.RemoteAddr)
	}
}

// FuzzRequest feeds metadata and peer addresses off the network to the
// request and the key functions: none panics, only text metadata becomes a
// header, and a key is found or its absence wraps ErrNoKey.
func FuzzRequest(f *testing.F) {
	f.Add("x-api-key", "k1", "192.0.2.7:5000")
	f.Add("token-bin", "\x00", "[2001:db8::1]:443")
	f.Add(":authority", "", "not an address")
	f.Add("X-Forwarded-For", "192.0.2.1, 10.0.0.1", "@")
	f.Fuzz(func(t *testing.T, key, value, addr string) {
		ctx := incoming(metadata.Pairs(key, value), stringAddr(addr))
		r := request(ctx, "/pkg.Svc/Do")
		for k := range r.Header {
			if strings.HasPrefix(k, ":") || strings.HasSuffix(strings.ToLower(k), "-bin") {
				t.Errorf("header %q from metadata that is not text", k)
			}
		}
		for _, f := range []KeyFunc{Metadata(key), PeerAddr, Method} {
			if _, err := f(ctx, "/pkg.Svc/Do"); err != nil && !errors.Is(err, ErrNoKey) {
				t.Errorf("key error %v does not wrap ErrNoKey", err)
			}
		}
	})
}

// TestFieldNames: each field's metadata name is its header name in lower
// case, as metadata requires.
func TestFieldNames(t *testing.T) {
	for _, n := range fieldNames {
		if strings.ToLower(n[0]) != n[1] {
			t.Errorf("%q goes into metadata as %q", n[0], n[1])
		}
	}
}

type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }
