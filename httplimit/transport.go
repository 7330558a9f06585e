package httplimit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit"
)

// Transport is an http.RoundTripper that waits for a hit on a Waiter before
// each request it sends: the fleet-wide client throttle. Give every process
// of a fleet a Transport on the same node cluster (or store, or failover
// tier) and the same Rule, and together they call the API behind it at no
// more than the Rule allows, each request waiting its turn instead of
// failing (see ringlimit.Waiter).
//
// A request whose context ends before its turn, or whose wait would
// outlast its context's deadline or MaxWait (ringlimit.ErrWaitTooLong), is
// not sent: RoundTrip returns the wait's error, wrapped, and closes the
// request's body. Transport is safe for simultaneous use if its Base and
// Waiter are.
type Transport struct {
	// Waiter keeps the shared limit.
	Waiter ringlimit.Waiter
	// Rule is the limit each request takes one hit from.
	Rule ringlimit.Rule
	// Key returns the key a request counts under. If nil, HostKey: each
	// host has its own limit, whatever the case of its name or whether
	// the URL names its default port.
	Key func(r *http.Request) string
	// Base sends the requests. If nil, http.DefaultTransport.
	Base http.RoundTripper
	// MaxWait is the longest a request waits for its turn: a request whose
	// context has no deadline, or a later one, waits at most this long,
	// and one whose turn is further off is refused at once
	// (ringlimit.ErrWaitTooLong), consuming nothing. If zero,
	// DefaultMaxWait; if negative, only the request's context bounds the
	// wait.
	MaxWait time.Duration
}

// DefaultMaxWait is Transport's MaxWait when it is zero. Without a bound,
// a request with no deadline waited as long as the queue ahead of it
// reached (a bucket's reaches centuries): a queue that grows faster than
// the limit drains held a goroutine, a connection's caller and a
// reservation for each request, unseen. 30 s is about the timeout HTTP
// clients and proxies give a request, so a request that waits longer has
// usually been given up on by whoever sent it; a throttle that queues
// normally (a burst of a few hundred requests at tens a second) waits far
// less.
const DefaultMaxWait = 30 * time.Second

// HostKey is Transport's key when its Key is nil: "client:" and the
// request's host, lower-cased, without a trailing dot, and with its port
// (the scheme's default, 80 for http and 443 for https, when the URL
// names none), so that https://API.example/, https://api.example:443/ and
// https://api.example./ share one limit.
func HostKey(r *http.Request) string {
	u := r.URL
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port := u.Port()
	if port == "" {
		switch strings.ToLower(u.Scheme) {
		case "http", "ws":
			port = "80"
		case "https", "wss":
			port = "443"
		default:
			return "client:" + host
		}
	}
	return "client:" + net.JoinHostPort(host, port)
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip waits for the request's turn, then sends it with Base.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	key := ""
	if t.Key != nil {
		key = t.Key(r)
	} else {
		key = HostKey(r)
	}
	ctx := r.Context()
	if max := t.MaxWait; max >= 0 {
		if max == 0 {
			max = DefaultMaxWait
		}
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > max {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, max) // the wait's only: the request is sent under its own
			defer cancel()
		}
	}
	if _, err := t.Waiter.WaitN(ctx, key, t.Rule, 1); err != nil {
		if r.Body != nil {
			r.Body.Close() // RoundTrip closes the body, even on errors
		}
		return nil, fmt.Errorf("httplimit: transport: %w", err)
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}
