package httplimit

import (
	"fmt"
	"net/http"

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
// outlast its context's deadline (ringlimit.ErrWaitTooLong), is not sent:
// RoundTrip returns the wait's error, wrapped, and closes the request's
// body. Transport is safe for simultaneous use if its Base and Waiter are.
type Transport struct {
	// Waiter keeps the shared limit.
	Waiter ringlimit.Waiter
	// Rule is the limit each request takes one hit from.
	Rule ringlimit.Rule
	// Key returns the key a request counts under. If nil, "client:" and
	// the request's host (r.URL.Host), so each host has its own limit.
	Key func(r *http.Request) string
	// Base sends the requests. If nil, http.DefaultTransport.
	Base http.RoundTripper
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip waits for the request's turn, then sends it with Base.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	key := "client:" + r.URL.Host
	if t.Key != nil {
		key = t.Key(r)
	}
	if _, err := t.Waiter.WaitN(r.Context(), key, t.Rule, 1); err != nil {
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
