package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/ringlimit/ringlimit/rules"
)

// ErrNoKey is wrapped by key functions that find nothing to key a request
// on: an unparsable RemoteAddr, a missing header.
var ErrNoKey = errors.New("httplimit: no key")

// KeyFunc returns the key a request's hits count against. An error (which
// should wrap ErrNoKey) goes to the middleware's key-error handler. The
// middleware prefixes the key with the rule's name.
type KeyFunc func(r *http.Request) (string, error)

// ClientIP finds a request's client address. The zero ClientIP trusts no
// proxy and groups IPv6 clients by /64.
//
// The client is RemoteAddr's host, unless that is a trusted proxy: then
// X-Forwarded-For is walked from right to left (the last header line first),
// skipping trusted hops, and the first untrusted address is the client. A hop
// that is not an address ends the walk at the last trusted hop seen, which is
// then taken as the client; so is a chain made only of trusted hops. Entries
// to the left of the first untrusted hop were written by the client and are
// never believed.
type ClientIP struct {
	// TrustedProxies lists the networks of the proxies whose
	// X-Forwarded-For entries are believed. If empty, X-Forwarded-For is
	// ignored.
	TrustedProxies []netip.Prefix
	// IPv6Prefix is how many leading bits of an IPv6 address make the key:
	// one subscriber usually holds a whole /64, so keying by full address
	// would let them rotate through 2^64 keys. If zero (or outside 1..128),
	// 64; 128 keys each address alone. IPv4 addresses are keyed whole.
	IPv6Prefix int
}

// Addr returns the client's address (IPv4-mapped IPv6 addresses unmapped,
// zones dropped).
func (c ClientIP) Addr(r *http.Request) (netip.Addr, error) {
	peer, err := parseHop(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: RemoteAddr %q is not an address", ErrNoKey, r.RemoteAddr)
	}
	if !c.trusted(peer) {
		return peer, nil
	}
	client := peer
	xff := r.Header["X-Forwarded-For"]
	for i := len(xff) - 1; i >= 0; i-- {
		v := xff[i]
		for v != "" {
			hop := v
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				hop, v = v[j+1:], v[:j]
			} else {
				v = ""
			}
			hop = strings.TrimSpace(hop)
			if hop == "" {
				continue
			}
			a, err := parseHop(hop)
			if err != nil {
				return client, nil
			}
			if !c.trusted(a) {
				return a, nil
			}
			client = a
		}
	}
	return client, nil
}

// Key returns the client's address as a key: IPv4 whole ("192.0.2.7"), IPv6
// as its prefix ("2001:db8:1:2::/64").
func (c ClientIP) Key(r *http.Request) (string, error) {
	var buf [64]byte
	b, err := c.appendKey(buf[:0], r)
	return string(b), err
}

func (c ClientIP) appendKey(dst []byte, r *http.Request) ([]byte, error) {
	a, err := c.Addr(r)
	if err != nil {
		return dst, err
	}
	if a.Is4() {
		return a.AppendTo(dst), nil
	}
	bits := c.IPv6Prefix
	if bits <= 0 || bits > 128 {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p.AppendTo(dst), nil
}

func (c ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop parses "addr", "addr:port" or "[v6]:port". It tries the form the
// text looks like first, so the common cases allocate no error.
func parseHop(s string) (netip.Addr, error) {
	if strings.HasPrefix(s, "[") || strings.Count(s, ":") == 1 {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return ap.Addr().Unmap().WithZone(""), nil
		}
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	return a.Unmap().WithZone(""), nil
}

// Header keys requests by the first value of the named header; a request
// without it is an ErrNoKey error.
func Header(name string) KeyFunc {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := headerValue(r, name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: no %s header", ErrNoKey, name)
	}
}

func headerValue(r *http.Request, canonical string) string {
	if vs := r.Header[canonical]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// Route keys requests by the http.ServeMux pattern that matched them
// (Request.Pattern, like "GET /items/{id}"), so every item shares one limit.
// The pattern is set only when the middleware runs inside the mux
// (mux.Handle(pattern, mw(h))); outside, Route falls back to URL.Path.
func Route(r *http.Request) (string, error) { return route(r), nil }

func route(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	return r.URL.Path
}

// Compose keys requests by every one of fs, joined by "|": Compose(ip, Route)
// limits each client on each route.
func Compose(fs ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		for i, f := range fs {
			k, err := f(r)
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

// fixedKey is the fixed rule's key: "name:" and the key function's result.
func (m *Middleware) fixedKey(r *http.Request) (string, error) {
	var buf [128]byte
	b := append(append(buf[:0], m.name...), ':')
	if m.key == nil {
		b, err := m.ip.appendKey(b, r)
		if err != nil {
			return "", err
		}
		return string(b), nil
	}
	k, err := m.key(r)
	if err != nil {
		return "", err
	}
	return string(append(b, k...)), nil
}

// specKey is a rule's key: "name:" and its key spec's parts joined by "|".
func (m *Middleware) specKey(rl *rules.Rule, r *http.Request) (string, error) {
	var buf [128]byte
	b := append(append(buf[:0], rl.Name...), ':')
	for i := range rl.Key.Len() {
		if i > 0 {
			b = append(b, '|')
		}
		switch p := rl.Key.Part(i); p.Kind {
		case rules.KeyIP:
			var err error
			if b, err = m.ip.appendKey(b, r); err != nil {
				return "", err
			}
		case rules.KeyHeader:
			v := headerValue(r, p.Header)
			if v == "" {
				return "", fmt.Errorf("%w: no %s header", ErrNoKey, p.Header)
			}
			b = append(b, v...)
		case rules.KeyRoute:
			b = append(b, route(r)...)
		}
	}
	return string(b), nil
}

// overrideKey is the state key of a rule's override i: "name", a NUL that
// no rule name, header value or client IP can hold, i, ":" and the key value,
// so an override never shares a count with the rule's own limits.
func overrideKey(name string, i int, value string) string {
	var buf [128]byte
	b := append(append(buf[:0], name...), 0)
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(append(b, ':'), value...)
	return string(b)
}
