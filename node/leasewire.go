package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/peer"
)

// The lease messages travel in OpStates frames, as the hand-off and wait
// messages do: the first item is a header, the second the key. A node of
// the release before refuses them (ErrClosed): it leases nothing, and its
// peers forward to it as before.
//
//	header: key leaseMagic | value: kind u8 | from (u8 length | bytes)
//	item:   key | rule | n i64 | id u64 | left i64
//	         ask:    n is the hits wanted; id the lease the asker holds now (0: none), with left hits
//	         back:   n is what lease id has left, given back
//	         recall: the holder of lease id gives it up and answers what it had left
//	         revoke: the same, and nothing comes back (the key was reset)
//	answer (Result.State): n i64 | life ms i64 | id u64
//	         to ask: the lease granted (n 0: none); to a recall: what it had left
const leaseMagic = "\x00lease1"

const (
	leaseAsk byte = iota + 1
	leaseBack
	leaseRecall
	leaseRevoke
)

var errLeaseMsg = errors.New("node: malformed lease message")

type leaseMsg struct {
	kind byte
	from string
	key  string
	rule ringlimit.Rule
	n    int64
	id   uint64
	left int64 // ask: what lease id has left
}

type leaseAnswer struct {
	n    int64
	life time.Duration
	id   uint64
}

func leaseRequest(m *leaseMsg) *peer.Request {
	h := appendName([]byte{m.kind}, m.from)
	v := appendRule(nil, m.rule)
	v = binary.BigEndian.AppendUint64(v, uint64(m.n))
	v = binary.BigEndian.AppendUint64(v, m.id)
	v = binary.BigEndian.AppendUint64(v, uint64(m.left))
	return &peer.Request{Op: peer.OpStates, States: []peer.Item{{Key: leaseMagic, Value: h}, {Key: m.key, Value: v}}}
}

func isLease(items []peer.Item) bool { return len(items) > 0 && items[0].Key == leaseMagic }

// parseLease decodes a lease message; every byte is the sender's.
func parseLease(items []peer.Item) (leaseMsg, error) {
	bad := func(what string) (leaseMsg, error) { return leaseMsg{}, fmt.Errorf("%w: %s", errLeaseMsg, what) }
	if !isLease(items) || len(items) != 2 {
		return bad("shape")
	}
	h := items[0].Value
	if len(h) < 1 || h[0] < leaseAsk || h[0] > leaseRevoke {
		return bad("kind")
	}
	m := leaseMsg{kind: h[0], key: items[1].Key}
	var ok bool
	if m.from, h, ok = readName(h[1:]); !ok || m.from == "" || len(h) != 0 {
		return bad("header")
	}
	v := items[1].Value
	if len(v) != ruleLen+24 {
		return bad("item")
	}
	rule, err := readRule(v)
	if err != nil {
		return leaseMsg{}, err
	}
	m.rule = rule
	m.n, m.id = int64(binary.BigEndian.Uint64(v[ruleLen:])), binary.BigEndian.Uint64(v[ruleLen+8:])
	m.left = int64(binary.BigEndian.Uint64(v[ruleLen+16:]))
	if m.n < 0 || m.left < 0 {
		return bad("hits")
	}
	if err := ringlimit.ValidateCall(m.key, m.rule, 0); err != nil {
		return leaseMsg{}, fmt.Errorf("%w: %w", errLeaseMsg, err)
	}
	return m, nil
}

// readRule decodes a rule (appendRule) from at least ruleLen bytes,
// checking its window's range; the rule itself is checked by the caller
// (ValidateCall).
func readRule(v []byte) (ringlimit.Rule, error) {
	window := int64(binary.BigEndian.Uint64(v[9:]))
	if window <= 0 || window > int64(ringlimit.MaxWindow/time.Millisecond) {
		return ringlimit.Rule{}, fmt.Errorf("%w: window", errWaitMsg)
	}
	return ringlimit.Rule{Algorithm: ringlimit.Algorithm(v[0]), Limit: int64(binary.BigEndian.Uint64(v[1:])),
		Window: time.Duration(window) * time.Millisecond, Burst: int64(binary.BigEndian.Uint64(v[17:]))}, nil
}

func appendLeaseAnswer(b []byte, a leaseAnswer) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(a.n))
	b = binary.BigEndian.AppendUint64(b, uint64(msCeil(a.life)))
	return binary.BigEndian.AppendUint64(b, a.id)
}

func parseLeaseAnswer(b []byte) (leaseAnswer, error) {
	if len(b) != 24 {
		return leaseAnswer{}, fmt.Errorf("%w: answer", errLeaseMsg)
	}
	n, life := int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:]))
	if n < 0 || life < 0 || life > int64(math.MaxInt64/time.Millisecond) {
		return leaseAnswer{}, fmt.Errorf("%w: answer's numbers", errLeaseMsg)
	}
	return leaseAnswer{n: n, life: time.Duration(life) * time.Millisecond, id: binary.BigEndian.Uint64(b[16:])}, nil
}
