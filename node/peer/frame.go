package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit"
)

// The wire format. After the handshake (auth.go) both sides exchange frames:
//
//	header: version u8 | type u8 | body length u32 | request id u64   (14 bytes, big endian)
//	body:   by type, below
//
// A request's id comes back on its response; responses may come in any order
// and many requests may be in flight on one connection. A frame with another
// version, an unknown type, a body over MaxBody or a body that does not parse
// closes the connection.
const (
	Version   = 1
	headerLen = 14
	// MaxBody is the largest body accepted: a request with a key of
	// ringlimit.MaxKeyLen bytes, with room to spare.
	MaxBody = 8 << 10
)

// Frame types.
const (
	typeAllow  = 1 // body: request
	typeReset  = 2 // body: key
	typeResult = 3 // body: result
)

// Op is what a Request asks.
type Op uint8

const (
	OpAllow Op = iota // AllowN (N == 0: Peek)
	OpReset           // Reset
)

// Request is one forwarded call.
type Request struct {
	Op   Op
	Key  string
	Rule ringlimit.Rule // OpAllow only
	N    int64          // OpAllow only
}

// Result is the answer to a Request: a Decision, or the error the owner
// returned (only bad input or a closed owner travel: see errCode).
type Result struct {
	Decision ringlimit.Decision
	Err      error
}

// Error codes carried in a result; the sentinels are rebuilt on arrival.
const (
	codeOK = iota
	codeInvalidKey
	codeInvalidRule
	codeInvalidHits
	codeClosed
	codeOther
)

var codeErrs = [...]error{
	codeInvalidKey:  ringlimit.ErrInvalidKey,
	codeInvalidRule: ringlimit.ErrInvalidRule,
	codeInvalidHits: ringlimit.ErrInvalidHits,
	codeClosed:      ringlimit.ErrClosed,
	codeOther:       errors.New("peer: owner failed"),
}

func errCode(err error) byte {
	for c, e := range codeErrs {
		if e != nil && errors.Is(err, e) {
			return byte(c)
		}
	}
	if err != nil {
		return codeOther
	}
	return codeOK
}

// ErrMalformed is returned for a frame that does not parse.
var ErrMalformed = errors.New("peer: malformed frame")

func appendHeader(b []byte, typ byte, id uint64, bodyLen int) []byte {
	b = append(b, Version, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(bodyLen))
	return binary.BigEndian.AppendUint64(b, id)
}

// parseHeader checks a header and returns its type, id and body length.
func parseHeader(h []byte) (typ byte, id uint64, n int, err error) {
	if h[0] != Version {
		return 0, 0, 0, fmt.Errorf("%w: version %d", ErrMalformed, h[0])
	}
	typ, n, id = h[1], int(binary.BigEndian.Uint32(h[2:6])), binary.BigEndian.Uint64(h[6:14])
	if typ < typeAllow || typ > typeResult {
		return 0, 0, 0, fmt.Errorf("%w: type %d", ErrMalformed, typ)
	}
	if n > MaxBody {
		return 0, 0, 0, fmt.Errorf("%w: body of %d bytes", ErrMalformed, n)
	}
	return typ, id, n, nil
}

// Request body: algorithm u8 | limit i64 | window ms i64 | burst i64 | n i64 | key.
// Reset body: key.
const allowFixed = 1 + 4*8

func appendRequest(b []byte, id uint64, r *Request) []byte {
	if r.Op == OpReset {
		b = appendHeader(b, typeReset, id, len(r.Key))
		return append(b, r.Key...)
	}
	b = appendHeader(b, typeAllow, id, allowFixed+len(r.Key))
	b = append(b, byte(r.Rule.Algorithm))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Rule.Limit))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Rule.WindowMillis()))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Rule.Burst))
	b = binary.BigEndian.AppendUint64(b, uint64(r.N))
	return append(b, r.Key...)
}

// parseRequest parses a request body. The values are not validated here: the
// owner's limiter validates them as it would a local call.
func parseRequest(typ byte, body []byte) (Request, error) {
	switch typ {
	case typeReset:
		return Request{Op: OpReset, Key: string(body)}, nil
	case typeAllow:
		if len(body) < allowFixed {
			return Request{}, fmt.Errorf("%w: request of %d bytes", ErrMalformed, len(body))
		}
		u := func(i int) int64 { return int64(binary.BigEndian.Uint64(body[1+8*i:])) }
		w := u(1)
		if w < 0 || w > int64(1<<62/time.Millisecond) {
			return Request{}, fmt.Errorf("%w: window %d ms", ErrMalformed, w)
		}
		return Request{
			Op:   OpAllow,
			Rule: ringlimit.Rule{Algorithm: ringlimit.Algorithm(body[0]), Limit: u(0), Window: time.Duration(w) * time.Millisecond, Burst: u(2)},
			N:    u(3),
			Key:  string(body[allowFixed:]),
		}, nil
	}
	return Request{}, fmt.Errorf("%w: type %d is not a request", ErrMalformed, typ)
}

// Result body: code u8 | allowed u8 | source u8 | limit i64 | remaining i64 |
// retry ms i64 | reset ms i64 | delay ms i64.
const resultLen = 3 + 5*8

func appendResult(b []byte, id uint64, r *Result) []byte {
	b = appendHeader(b, typeResult, id, resultLen)
	d := &r.Decision
	allowed := byte(0)
	if d.Allowed {
		allowed = 1
	}
	b = append(b, errCode(r.Err), allowed, byte(d.Source))
	for _, v := range [...]int64{d.Limit, d.Remaining, int64(d.RetryAfter / time.Millisecond),
		int64(d.ResetAfter / time.Millisecond), int64(d.Delay / time.Millisecond)} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func parseResult(body []byte) (Result, error) {
	if len(body) != resultLen || body[0] > codeOther || body[1] > 1 {
		return Result{}, fmt.Errorf("%w: result of %d bytes", ErrMalformed, len(body))
	}
	u := func(i int) int64 { return int64(binary.BigEndian.Uint64(body[3+8*i:])) }
	ms := func(i int) time.Duration { return time.Duration(u(i)) * time.Millisecond }
	r := Result{Decision: ringlimit.Decision{
		Allowed: body[1] == 1, Source: ringlimit.Source(body[2]),
		Limit: u(0), Remaining: u(1), RetryAfter: ms(2), ResetAfter: ms(3), Delay: ms(4),
	}}
	if c := body[0]; c != codeOK {
		r.Err = fmt.Errorf("peer: owner: %w", codeErrs[c])
	}
	return r, nil
}
