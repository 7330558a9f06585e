package httplimit

import (
	"net/http"
	"strconv"
	"time"
)

// Canonical header names, so the map is written directly.
const (
	hLimit      = "X-Ratelimit-Limit"
	hRemaining  = "X-Ratelimit-Remaining"
	hReset      = "X-Ratelimit-Reset"
	hPolicy     = "Ratelimit-Policy"
	hRateLimit  = "Ratelimit"
	hRetryAfter = "Retry-After"
	// The first seed article's name for Retry-After, sent beside it.
	hXRetryAfter = "X-Ratelimit-Retry-After"
)

// HeaderStyle chooses which rate-limit headers a Middleware sets, in the
// spirit of express-rate-limit's standardHeaders. Every style sets
// Retry-After (and X-RateLimit-Retry-After) on a denial.
type HeaderStyle uint8

const (
	// HeadersDraft11, the default: draft-ietf-httpapi-ratelimit-headers-11's
	// (and draft 10's: the syntax is the same) RateLimit-Policy
	// ("name";q=quota;w=window-seconds for each limit applied) and RateLimit
	// ("name";r=available quota;t=effective window of the binding one), plus
	// X-RateLimit-*. t is the seconds until the binding limit is back to full
	// capacity, except on a 429, where it is the Retry-After value, so that
	// Retry-After is never earlier than the end of the effective window (as
	// the draft asks, and as its example does).
	HeadersDraft11 HeaderStyle = iota
	// HeadersDraft7: draft 7's combined form, which most client libraries
	// of 2024–2026 parse: RateLimit: limit=L, remaining=R, reset=S for the
	// binding decision, RateLimit-Policy: L;w=W for each rule applied, plus
	// X-RateLimit-*.
	HeadersDraft7
	// HeadersLegacy: X-RateLimit-Limit, -Remaining and -Reset only.
	HeadersLegacy
)

// HeadersDraft10 is HeadersDraft11: draft 11 kept draft 10's fields and
// syntax, and renamed r and t.
const HeadersDraft10 = HeadersDraft11

// setHeaders writes the rate-limit headers of style for the decisions res,
// res[top] being the binding one:
//
//	X-RateLimit-Limit      res[top]'s Limit
//	X-RateLimit-Remaining  res[top]'s Remaining
//	X-RateLimit-Reset      seconds until res[top] resets (ResetAfter, rounded up)
//	RateLimit-Policy       draft 11: "name";q=Limit;w=Window-seconds for each, comma separated
//	                       draft 7:  Limit;w=Window-seconds for each
//	RateLimit              draft 11: "name";r=Remaining;t=reset-seconds of res[top];
//	                       on a 429 (res[top] denies and retry is set), t=Retry-After
//	                       draft 7:  limit=L, remaining=R, reset=S of res[top]
//	Retry-After            when res[top] denies and retry is set: RetryAfter in seconds,
//	                       rounded up, at least 1
//	X-RateLimit-Retry-After the same value, under the name the first seed article uses
//
// All values share one string and one slice: two allocations.
func setHeaders(h http.Header, res []applied, top int, retry bool, style HeaderStyle) {
	var buf [256]byte
	b := buf[:0]
	var ends [6]int
	d := res[top].d
	b = strconv.AppendInt(b, d.Limit, 10)
	ends[0] = len(b)
	b = strconv.AppendInt(b, d.Remaining, 10)
	ends[1] = len(b)
	b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
	ends[2] = len(b)
	switch style {
	case HeadersDraft11:
		for i, a := range res {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = appendSFString(b, a.name)
			b = append(b, ";q="...)
			b = strconv.AppendInt(b, a.rule.Limit, 10)
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, max(1, ceilSeconds(a.rule.Window)), 10)
		}
		ends[3] = len(b)
		b = appendSFString(b, res[top].name)
		b = append(b, ";r="...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		b = append(b, ";t="...)
		if !d.Allowed && retry { // a 429: t is Retry-After, never later
			b = strconv.AppendInt(b, retryAfterSeconds(d.RetryAfter), 10)
		} else {
			b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
		}
		ends[4] = len(b)
	case HeadersDraft7:
		for i, a := range res {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendInt(b, a.rule.Limit, 10)
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, max(1, ceilSeconds(a.rule.Window)), 10)
		}
		ends[3] = len(b)
		b = append(b, "limit="...)
		b = strconv.AppendInt(b, d.Limit, 10)
		b = append(b, ", remaining="...)
		b = strconv.AppendInt(b, d.Remaining, 10)
		b = append(b, ", reset="...)
		b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
		ends[4] = len(b)
	default: // HeadersLegacy: no RateLimit fields
		ends[3], ends[4] = len(b), len(b)
	}
	n := 5
	if !d.Allowed && retry {
		b = strconv.AppendInt(b, retryAfterSeconds(d.RetryAfter), 10)
		ends[5] = len(b)
		n = 6
	}
	s := string(b)
	vals := make([]string, n)
	start := 0
	for i := range n {
		vals[i] = s[start:ends[i]]
		start = ends[i]
	}
	h[hLimit] = vals[0:1:1]
	h[hRemaining] = vals[1:2:2]
	h[hReset] = vals[2:3:3]
	if style != HeadersLegacy {
		h[hPolicy] = vals[3:4:4]
		h[hRateLimit] = vals[4:5:5]
	}
	if n == 6 {
		h[hRetryAfter] = vals[5:6:6]
		h[hXRetryAfter] = vals[5:6:6]
	}
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d ≤ 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// retryAfterSeconds is Retry-After's value: d rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int64 { return max(1, ceilSeconds(d)) }

// appendSFString appends s as a Structured Field string (RFC 9651): quoted,
// '"' and '\' escaped; bytes outside printable ASCII, which a string cannot
// hold, become '?'.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
