package peer

import (
	"encoding/binary"
	"fmt"

	"github.com/ringlimit/ringlimit"
)

// AllowAll on the wire: one request carries every rule, one result every
// decision, so a forwarded AllowAll is one round trip.
//
//	request body: from length u8 | from | count u8 | count × (algorithm u8 |
//	              limit i64 | window ms i64 | burst i64) | n i64 | key
//	result tail (code codeAll): count − 1 u8 | (count − 1) × (allowed u8 |
//	              source u8 | limit i64 | remaining i64 | retry ms i64 |
//	              reset ms i64 | delay ms i64); the fixed part is decision 0
const (
	ruleLen     = 1 + 3*8
	decisionLen = 2 + 5*8
)

func appendAllowAll(b []byte, id uint64, r *Request) []byte {
	from := r.From[:min(len(r.From), 255)]
	rules := r.Rules[:min(len(r.Rules), 255)]
	b = appendHeader(b, typeAllowAll, id, 1+len(from)+1+len(rules)*ruleLen+8+len(r.Key))
	b = append(b, byte(len(from)))
	b = append(b, from...)
	b = append(b, byte(len(rules)))
	for _, rule := range rules {
		b = append(b, byte(rule.Algorithm))
		b = binary.BigEndian.AppendUint64(b, uint64(rule.Limit))
		b = binary.BigEndian.AppendUint64(b, uint64(rule.WindowMillis()))
		b = binary.BigEndian.AppendUint64(b, uint64(rule.Burst))
	}
	b = binary.BigEndian.AppendUint64(b, uint64(r.N))
	return append(b, r.Key...)
}

// parseAllowAll parses an AllowAll request body. The rules are not
// validated here (the owner does, as for a local call), but a count out of 1
// to ringlimit.MaxRules, or a window no rule may have, is a bad call (an
// error that wraps ringlimit.ErrInvalidRule: see parseRequest).
func parseAllowAll(body []byte) (Request, error) {
	bad := func(what string) (Request, error) {
		return Request{}, fmt.Errorf("%w: allow-all of %d bytes: %s", ErrMalformed, len(body), what)
	}
	if len(body) < 2 || len(body) < 2+int(body[0]) {
		return bad("short")
	}
	r := Request{Op: OpAllowAll, From: string(body[1 : 1+int(body[0])])}
	body2 := body[1+int(body[0]):]
	k := int(body2[0])
	body2 = body2[1:]
	if len(body2) < k*ruleLen+8 {
		return bad("short rules")
	}
	r.N = int64(binary.BigEndian.Uint64(body2[k*ruleLen:]))
	r.Key = string(body2[k*ruleLen+8:])
	if k == 0 || k > ringlimit.MaxRules {
		// Well formed, but no call may apply so many rules (a node of a
		// release with a larger MaxRules might ask): answered, not closed.
		return r, fmt.Errorf("%w: %d rules, want 1 to %d", ringlimit.ErrInvalidRule, k, ringlimit.MaxRules)
	}
	var err error
	r.Rules = make([]ringlimit.Rule, k)
	for i := range r.Rules {
		p := body2[i*ruleLen:]
		u := func(j int) int64 { return int64(binary.BigEndian.Uint64(p[1+8*j:])) }
		w, werr := wireWindow(u(1))
		if werr != nil && err == nil {
			err = fmt.Errorf("rules[%d]: %w", i, werr)
		}
		r.Rules[i] = ringlimit.Rule{Algorithm: ringlimit.Algorithm(p[0]), Limit: u(0), Window: w, Burst: u(2)}
	}
	return r, err
}

func appendDecisions(b []byte, ds []ringlimit.Decision) []byte {
	ds = ds[:min(len(ds), ringlimit.MaxRules-1)]
	b = append(b, byte(len(ds)))
	for i := range ds {
		d := &ds[i]
		allowed := byte(0)
		if d.Allowed {
			allowed = 1
		}
		b = append(b, allowed, byte(d.Source))
		for _, v := range [...]int64{d.Limit, d.Remaining, msCeil(d.RetryAfter), msCeil(d.ResetAfter), msCeil(d.Delay)} {
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
	}
	return b
}

// parseDecisions parses a codeAll tail: first is decision 0, from the fixed
// part.
func parseDecisions(first ringlimit.Decision, tail []byte) ([]ringlimit.Decision, error) {
	if len(tail) < 1 || int(tail[0]) > ringlimit.MaxRules-1 || len(tail) != 1+int(tail[0])*decisionLen {
		return nil, fmt.Errorf("%w: decisions of %d bytes", ErrMalformed, len(tail))
	}
	ds := make([]ringlimit.Decision, 1+int(tail[0]))
	ds[0] = first
	for i := 1; i < len(ds); i++ {
		p := tail[1+(i-1)*decisionLen:]
		if p[0] > 1 {
			return nil, fmt.Errorf("%w: decision %d allowed %d", ErrMalformed, i, p[0])
		}
		u := func(j int) int64 { return int64(binary.BigEndian.Uint64(p[2+8*j:])) }
		if u(0) < 0 || u(1) < 0 {
			return nil, fmt.Errorf("%w: decision %d counts %d, %d", ErrMalformed, i, u(0), u(1))
		}
		ds[i] = ringlimit.Decision{Allowed: p[0] == 1, Source: ringlimit.Source(p[1]),
			Limit: u(0), Remaining: u(1), RetryAfter: fromMs(u(2)), ResetAfter: fromMs(u(3)), Delay: fromMs(u(4))}
	}
	return ds, nil
}
