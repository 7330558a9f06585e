package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ringlimit/ringlimit"
)

// The frame format. After the handshake (auth.go) both sides exchange
// frames in records (wire.go), sealed when the cluster has a secret:
//
//	header: version u8 | type u8 | body length u32 | request id u64   (14 bytes, big endian)
//	body:   by type, below
//
// A request's id comes back on its response; responses may come in any order
// and many requests may be in flight on one connection. A frame with another
// version than frameVersion, an unknown type, a body over MaxBody or a body
// that does not parse closes the connection.
const (
	// Version is the highest protocol version this package speaks, which
	// the handshake settles. Version 3 changed the records (several frames
	// in one: wire.go), not the frames.
	Version = 3
	// frameVersion is the version every frame's header carries: the frames
	// are those of version 2 in every version since.
	frameVersion = 2
	headerLen    = 14
	// MaxBody is the largest body accepted: a request with a key of
	// ringlimit.MaxKeyLen bytes, with room to spare.
	MaxBody = 8 << 10
	// MaxStatesBody is the largest body of a frame that carries key states
	// (a hand-off batch, or a result with a state).
	MaxStatesBody = 4 << 20
)

// Frame types.
const (
	typeAllow     = 1 // body: request
	typeReset     = 2 // body: key
	typeResult    = 3 // body: result
	typeAllowFrom = 4 // body: from length u8 | from | request
	typeTake      = 5 // body: from length u8 | from | key
	typeStates    = 6 // body: count u32 | (key length u16 | key | value length u32 | value)…
	typeAllowAll  = 7 // body: see multi.go
	lastType      = typeAllowAll
)

// Op is what a Request asks.
type Op uint8

const (
	OpAllow    Op = iota // AllowN (N == 0: Peek)
	OpReset              // Reset
	OpTake               // hand-off pull: the receiver gives up Key's state (Result.State) and redirects Key's calls to From, the sender, from then on
	OpStates             // hand-off push: the receiver installs States (a key that already holds a live state keeps it)
	OpAllowAll           // AllowAll of Rules (N == 0: peek); the Result carries Decisions
)

// Request is one forwarded call, or one step of a hand-off.
type Request struct {
	Op   Op
	Key  string         // OpAllow, OpReset, OpTake
	Rule ringlimit.Rule // OpAllow only
	N    int64          // OpAllow, OpAllowAll
	// Rules, for OpAllowAll: 1 to ringlimit.MaxRules rules (the owner
	// validates them).
	Rules []ringlimit.Rule
	// From, for OpAllow, says the call was redirected by a member that gave
	// the key up (see Result.MovedTo): the receiver decides it whatever its
	// own view of the ring, and if it holds no state for the key it first
	// takes the key's state from From. Empty for a plain forwarded call.
	From   string
	States []Item // OpStates only
}

// Item is one key's state in a hand-off. Value is opaque here: the node
// encodes and decodes it.
type Item struct {
	Key   string
	Value []byte
}

// Result is the answer to a Request: a Decision, or the error the owner
// returned (only bad input or a closed owner travel: see errCode).
type Result struct {
	Decision ringlimit.Decision
	Err      error
	// MovedTo, if not empty, says the receiver no longer holds the key: it
	// decided nothing, and the call should go (once, with From set) to
	// MovedTo.
	MovedTo string
	// State is the answer to OpTake: the key's state, nil if it held none.
	State []byte
	// Decisions is the answer to OpAllowAll: one per rule (Decision is
	// the first).
	Decisions []ringlimit.Decision
}

// Error codes carried in a result; the sentinels are rebuilt on arrival.
const (
	codeOK = iota
	codeInvalidKey
	codeInvalidRule
	codeInvalidHits
	codeClosed
	codeOther
	codeMoved // not an error: Result.MovedTo follows the fixed part
	codeAll   // not an error: Result.Decisions[1:] follow the fixed part (multi.go)
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
	b = append(b, frameVersion, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(bodyLen))
	return binary.BigEndian.AppendUint64(b, id)
}

// parseHeader checks a header and returns its type, id and body length.
func parseHeader(h []byte) (typ byte, id uint64, n int, err error) {
	if h[0] != frameVersion {
		return 0, 0, 0, fmt.Errorf("%w: version %d", ErrMalformed, h[0])
	}
	typ, n, id = h[1], int(binary.BigEndian.Uint32(h[2:6])), binary.BigEndian.Uint64(h[6:14])
	if typ < typeAllow || typ > lastType {
		return 0, 0, 0, fmt.Errorf("%w: type %d", ErrMalformed, typ)
	}
	if n > MaxStatesBody || n > MaxBody && typ != typeStates && typ != typeResult {
		return 0, 0, 0, fmt.Errorf("%w: body of %d bytes", ErrMalformed, n)
	}
	return typ, id, n, nil
}

// Request body: algorithm u8 | limit i64 | window ms i64 | burst i64 | n i64 | key.
// Reset body: key.
const allowFixed = 1 + 4*8

func appendRequest(b []byte, id uint64, r *Request) []byte {
	switch r.Op {
	case OpReset:
		b = appendHeader(b, typeReset, id, len(r.Key))
		return append(b, r.Key...)
	case OpTake:
		from := r.From[:min(len(r.From), 255)]
		b = appendHeader(b, typeTake, id, 1+len(from)+len(r.Key))
		b = append(b, byte(len(from)))
		b = append(b, from...)
		return append(b, r.Key...)
	case OpStates:
		n := 4
		for _, it := range r.States {
			n += 2 + len(it.Key) + 4 + len(it.Value)
		}
		b = appendHeader(b, typeStates, id, n)
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.States)))
		for _, it := range r.States {
			b = binary.BigEndian.AppendUint16(b, uint16(len(it.Key)))
			b = append(b, it.Key...)
			b = binary.BigEndian.AppendUint32(b, uint32(len(it.Value)))
			b = append(b, it.Value...)
		}
		return b
	case OpAllowAll:
		return appendAllowAll(b, id, r)
	}
	if r.From != "" {
		from := r.From[:min(len(r.From), 255)]
		b = appendHeader(b, typeAllowFrom, id, 1+len(from)+allowFixed+len(r.Key))
		b = append(b, byte(len(from)))
		b = append(b, from...)
	} else {
		b = appendHeader(b, typeAllow, id, allowFixed+len(r.Key))
	}
	b = append(b, byte(r.Rule.Algorithm))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Rule.Limit))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Rule.WindowMillis()))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Rule.Burst))
	b = binary.BigEndian.AppendUint64(b, uint64(r.N))
	return append(b, r.Key...)
}

// parseRequest parses a request body. The values are not validated here: the
// owner's limiter validates them as it would a local call. Its errors wrap
// ErrMalformed for a body that does not parse (the connection is closed),
// or ringlimit.ErrInvalidRule for a body that parses into a call no rule
// can make, as a node of another release may send (a window over
// ringlimit.MaxWindow, a count of rules out of range): that call is
// answered with the error, and the connection carries on.
func parseRequest(typ byte, body []byte) (Request, error) {
	switch typ {
	case typeReset:
		return Request{Op: OpReset, Key: string(body)}, nil
	case typeTake:
		if len(body) < 1 || len(body) < 1+int(body[0]) {
			return Request{}, fmt.Errorf("%w: take of %d bytes", ErrMalformed, len(body))
		}
		return Request{Op: OpTake, From: string(body[1 : 1+int(body[0])]), Key: string(body[1+int(body[0]):])}, nil
	case typeStates:
		return parseStates(body)
	case typeAllowAll:
		return parseAllowAll(body)
	case typeAllowFrom:
		if len(body) < 1 || len(body) < 1+int(body[0]) {
			return Request{}, fmt.Errorf("%w: redirected request of %d bytes", ErrMalformed, len(body))
		}
		from := string(body[1 : 1+int(body[0])])
		r, err := parseRequest(typeAllow, body[1+int(body[0]):])
		r.From = from
		if from == "" && !errors.Is(err, ErrMalformed) {
			err = fmt.Errorf("%w: redirected request without a sender", ErrMalformed)
		}
		return r, err
	case typeAllow:
		if len(body) < allowFixed {
			return Request{}, fmt.Errorf("%w: request of %d bytes", ErrMalformed, len(body))
		}
		u := func(i int) int64 { return int64(binary.BigEndian.Uint64(body[1+8*i:])) }
		w, err := wireWindow(u(1))
		return Request{
			Op:   OpAllow,
			Rule: ringlimit.Rule{Algorithm: ringlimit.Algorithm(body[0]), Limit: u(0), Window: w, Burst: u(2)},
			N:    u(3),
			Key:  string(body[allowFixed:]),
		}, err
	}
	return Request{}, fmt.Errorf("%w: type %d is not a request", ErrMalformed, typ)
}

func parseStates(body []byte) (Request, error) {
	bad := func() (Request, error) {
		return Request{}, fmt.Errorf("%w: states of %d bytes", ErrMalformed, len(body))
	}
	if len(body) < 4 {
		return bad()
	}
	count := binary.BigEndian.Uint32(body)
	body = body[4:]
	if uint64(count) > uint64(len(body))/6 {
		return bad()
	}
	r := Request{Op: OpStates, States: make([]Item, 0, count)}
	for range count {
		if len(body) < 2 {
			return bad()
		}
		k := int(binary.BigEndian.Uint16(body))
		if len(body) < 2+k+4 {
			return bad()
		}
		key := string(body[2 : 2+k])
		body = body[2+k:]
		v := int(binary.BigEndian.Uint32(body))
		if len(body) < 4+v {
			return bad()
		}
		r.States = append(r.States, Item{Key: key, Value: append([]byte(nil), body[4:4+v]...)})
		body = body[4+v:]
	}
	if len(body) != 0 {
		return bad()
	}
	return r, nil
}

// maxWindowMs is the longest window a request carries, in milliseconds:
// ringlimit.MaxWindow, the bound Rule.Validate applies, so every rule that
// validates travels. Every version of the wire accepts up to it.
const maxWindowMs = int64(ringlimit.MaxWindow / time.Millisecond)

// wireWindow is the Window of a rule whose window is ms on the wire. A
// window out of [0, maxWindowMs] is no rule's: the error wraps
// ringlimit.ErrInvalidRule, and the call is answered with it.
func wireWindow(ms int64) (time.Duration, error) {
	if ms < 0 || ms > maxWindowMs {
		return 0, fmt.Errorf("%w: window of %d ms on the wire, outside 0 to %d", ringlimit.ErrInvalidRule, ms, maxWindowMs)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Result body: code u8 | allowed u8 | source u8 | limit i64 | remaining i64 |
// retry ms i64 | reset ms i64 | delay ms i64, then MovedTo (code moved) or
// State (the rest).
const resultLen = 3 + 5*8

func appendResult(b []byte, id uint64, r *Result) []byte {
	code, tail := errCode(r.Err), r.State
	if r.MovedTo != "" && code == codeOK {
		code, tail = codeMoved, []byte(r.MovedTo)
	} else if len(r.Decisions) > 0 && code == codeOK {
		code, tail = codeAll, appendDecisions(nil, r.Decisions[1:])
	}
	b = appendHeader(b, typeResult, id, resultLen+len(tail))
	d := &r.Decision
	allowed := byte(0)
	if d.Allowed {
		allowed = 1
	}
	b = append(b, code, allowed, byte(d.Source))
	for _, v := range [...]int64{d.Limit, d.Remaining, msCeil(d.RetryAfter), msCeil(d.ResetAfter), msCeil(d.Delay)} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return append(b, tail...)
}

// msCeil is d in whole milliseconds, rounded up (a Decision's durations are
// whole milliseconds already, except the largest Duration, which a
// saturated duration is: it travels as one more millisecond than fits, and
// saturates again on arrival).
func msCeil(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// fromMs is the Duration of ms milliseconds, saturated: a count of
// milliseconds too large for a Duration is the largest Duration, and a
// negative one is zero. A long wait is an answer, not a fault: the caller
// gets it and the connection stays up.
func fromMs(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return 0
	case ms > math.MaxInt64/int64(time.Millisecond):
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}

func parseResult(body []byte) (Result, error) {
	if len(body) < resultLen || body[0] > codeAll || body[1] > 1 {
		return Result{}, fmt.Errorf("%w: result of %d bytes", ErrMalformed, len(body))
	}
	u := func(i int) int64 { return int64(binary.BigEndian.Uint64(body[3+8*i:])) }
	ms := func(i int) time.Duration { return fromMs(u(i)) }
	for i := range 2 {
		// Counts are never negative.
		if v := u(i); v < 0 {
			return Result{}, fmt.Errorf("%w: result field %d is %d", ErrMalformed, i, v)
		}
	}
	r := Result{Decision: ringlimit.Decision{
		Allowed: body[1] == 1, Source: ringlimit.Source(body[2]),
		Limit: u(0), Remaining: u(1), RetryAfter: ms(2), ResetAfter: ms(3), Delay: ms(4),
	}}
	tail := body[resultLen:]
	switch c := body[0]; {
	case c == codeMoved:
		if len(tail) == 0 {
			return Result{}, fmt.Errorf("%w: moved to nobody", ErrMalformed)
		}
		r.MovedTo = string(tail)
	case c == codeAll:
		ds, err := parseDecisions(r.Decision, tail)
		if err != nil {
			return Result{}, err
		}
		r.Decisions = ds
	case c != codeOK:
		r.Err = fmt.Errorf("peer: owner: %w", codeErrs[c])
	case len(tail) > 0:
		r.State = append([]byte(nil), tail...)
	}
	return r, nil
}
