package grpclimit

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/ringlimit/ringlimit/httplimit"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// ErrNoKey is httplimit.ErrNoKey, wrapped by key functions that find nothing
// to key a call on (a missing metadata value, a peer that is not an IP
// address), here and in httplimit's rules alike.
var ErrNoKey = httplimit.ErrNoKey

// KeyFunc returns the key a call's hits count against; fullMethod is the
// call's "/pkg.Service/Method". An error should wrap ErrNoKey. The
// interceptor prefixes the key with the rule's name.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// Metadata keys calls by the first value of the named metadata of the
// incoming call (on a server: the client's metadata). A call without it is
// an ErrNoKey error.
func Metadata(name string) KeyFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, error) {
		if vs := metadata.ValueFromIncomingContext(ctx, name); len(vs) > 0 && vs[0] != "" {
			return vs[0], nil
		}
		return "", fmt.Errorf("%w: no %s metadata", ErrNoKey, name)
	}
}

// Method keys calls by their full method, so that every caller of a method
// shares one limit.
func Method(_ context.Context, fullMethod string) (string, error) { return fullMethod, nil }

// PeerAddr keys calls by the address of the connection's peer, as
// httplimit's zero ClientIP keys requests: IPv4 whole, IPv6 by /64. A peer
// that is not an IP address (a Unix socket) is an ErrNoKey error. Behind a
// proxy, leave the key unset and use WithClientIP instead.
func PeerAddr(ctx context.Context, _ string) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", fmt.Errorf("%w: no peer", ErrNoKey)
	}
	return httplimit.ClientIP{}.Key(&http.Request{RemoteAddr: p.Addr.String()})
}

// Compose keys calls by every one of fs, joined by "|": Compose(PeerAddr,
// Method) limits each client on each method.
func Compose(fs ...KeyFunc) KeyFunc {
	return func(ctx context.Context, fullMethod string) (string, error) {
		var b strings.Builder
		for i, f := range fs {
			k, err := f(ctx, fullMethod)
			if err != nil {
				return "", err
			}
			if i > 0 {
				b.WriteByte('|')
			}
			b.WriteString(k)
		}
		return b.String(), nil
	}
}

// httpKey adapts f to the request that stands for a call (see request).
func httpKey(f KeyFunc) httplimit.KeyFunc {
	return func(r *http.Request) (string, error) { return f(r.Context(), r.URL.Path) }
}

// request builds the HTTP request that stands for a call to fullMethod:
// POST, the full method as its path, the incoming metadata as its headers
// (binary "-bin" values and pseudo-headers left out) and the peer's address
// as its RemoteAddr. httplimit's rules and key specs read it as they read a
// real request.
func request(ctx context.Context, fullMethod string) *http.Request {
	r, _ := http.NewRequestWithContext(ctx, http.MethodPost, "", nil) // an empty URL always parses
	r.URL.Path = fullMethod
	r.RequestURI = fullMethod
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		h := make(http.Header, len(md))
		for k, vs := range md {
			if strings.HasPrefix(k, ":") || strings.HasSuffix(k, "-bin") {
				continue
			}
			h[http.CanonicalHeaderKey(k)] = vs
		}
		r.Header = h
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
	}
	return r
}
