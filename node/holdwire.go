package node

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/hold"
	"github.com/ringlimit/ringlimit/internal/peer"
)

// The hand-off messages of the ownership core (internal/hold) travel in the
// peer link's OpStates frames: the first item is a header, the rest carry
// one key each. The node encodes and decodes them here; the peer link only
// carries bytes.
//
//	header:  key holdMagic | value: kind u8 | from (u8 length | bytes) | view id u64
//	pull:    one item: key | want inc u64 | gone inc u64 | gone (u8 length | bytes) | path count u8 | path names (u8 length | bytes)…
//	push:    items: key | inc u64 | version | state (encodeState)
//	confirm: items: key | version of the state confirmed (a node of the
//	         release before sends the value empty, and refuses a confirm
//	         with a version: its copy stays until it is asked for it)
//	done:    no items: the header's view id is the view the sender is clean in
//	drop:    items: key (value empty): the sender gave up its pull of the key
//	         from the receiver (a node of the release before refuses it)
//	settle:  no items: the sender asks for the receiver's word on the view
//	         (hold.Core.Settle); the answer, in Result.State, is
//	         idle u8 (1: Idle in that view, pushes confirmed) | arrivals u64
//	         (a node of the release before refuses it: no word)
//
// A version is epoch u64 | seq u64 | origins 3 × u64 (little endian, like
// every number here). A pull's answer travels in Result.State:
//
//	kind u8 | to (u8 length | bytes) | to's inc u64 | version | state (empty: none)
//
// and a push's answer is one byte per item: 0 taken, 1 refused, 2 refused
// because the node leaves (a node of the release before reads any non-zero
// byte as refused).
//
// The magic is not a valid key (a key is never empty, but it may hold any
// byte; this one starts with a zero byte and names the format): a node of
// the release before the core, which reads a push's first item's key as
// empty or as a key, takes it for a state it cannot decode and drops it.
const holdMagic = "\x00hold1"

// holdKind is what a hand-off message asks.
type holdKind uint8

const (
	holdPull holdKind = iota + 1
	holdPush
	holdConfirm
	holdDone
	holdDrop
	holdSettle
	lastHoldKind = holdSettle
)

// holdMsg is one decoded hand-off message.
type holdMsg struct {
	kind   holdKind
	from   string
	viewID uint64
	// pull
	key     string
	want    uint64
	gone    string
	goneInc uint64
	path    []string
	// push, confirm
	items []pushItem
}

// pushItem is one state in a push (or one key confirmed).
type pushItem struct {
	key string
	st  ringlimit.State
	ver hold.Version
	inc uint64 // the incarnation of the target it is meant for
}

// What a push's answer says of each state.
const (
	refusedOther   = 1 // refused (meant for an earlier incarnation of this node, say)
	refusedLeaving = 2 // refused: this node leaves
)

var errHoldMsg = errors.New("node: malformed hand-off message")

const versionLen = 5 * 8

func appendVersion(b []byte, v hold.Version) []byte {
	b = binary.LittleEndian.AppendUint64(b, v.Epoch)
	b = binary.LittleEndian.AppendUint64(b, v.Seq)
	for _, o := range v.Origins {
		b = binary.LittleEndian.AppendUint64(b, o)
	}
	return b
}

func readVersion(b []byte) (hold.Version, []byte, bool) {
	if len(b) < versionLen {
		return hold.Version{}, nil, false
	}
	v := hold.Version{Epoch: binary.LittleEndian.Uint64(b), Seq: binary.LittleEndian.Uint64(b[8:])}
	for i := range v.Origins {
		v.Origins[i] = binary.LittleEndian.Uint64(b[16+8*i:])
	}
	return v, b[versionLen:], true
}

func appendName(b []byte, s string) []byte {
	s = s[:min(len(s), 255)]
	b = append(b, byte(len(s)))
	return append(b, s...)
}

func readName(b []byte) (string, []byte, bool) {
	if len(b) < 1 || len(b) < 1+int(b[0]) {
		return "", nil, false
	}
	n := 1 + int(b[0]) // (as an int: 1+b[0] is a byte, and wraps at 255)
	return string(b[1:n]), b[n:], true
}

// holdRequest encodes m as a peer request.
func holdRequest(m *holdMsg) *peer.Request {
	h := []byte{byte(m.kind)}
	h = appendName(h, m.from)
	h = binary.LittleEndian.AppendUint64(h, m.viewID)
	items := []peer.Item{{Key: holdMagic, Value: h}}
	switch m.kind {
	case holdPull:
		v := binary.LittleEndian.AppendUint64(nil, m.want)
		v = binary.LittleEndian.AppendUint64(v, m.goneInc)
		v = appendName(v, m.gone)
		path := m.path[:min(len(m.path), 255)]
		v = append(v, byte(len(path)))
		for _, p := range path {
			v = appendName(v, p)
		}
		items = append(items, peer.Item{Key: m.key, Value: v})
	case holdPush:
		for _, it := range m.items {
			v := binary.LittleEndian.AppendUint64(nil, it.inc)
			v = appendVersion(v, it.ver)
			v = append(v, encodeState(it.st)...)
			items = append(items, peer.Item{Key: it.key, Value: v})
		}
	case holdConfirm:
		for _, it := range m.items {
			items = append(items, peer.Item{Key: it.key, Value: appendVersion(nil, it.ver)})
		}
	case holdDrop:
		for _, it := range m.items {
			items = append(items, peer.Item{Key: it.key})
		}
	}
	return &peer.Request{Op: peer.OpStates, States: items}
}

// isHold reports whether a push's items are a hand-off message.
func isHold(items []peer.Item) bool { return len(items) > 0 && items[0].Key == holdMagic }

// parseHold decodes a hand-off message. Every byte is the sender's: a
// message that does not parse is refused whole.
func parseHold(items []peer.Item) (holdMsg, error) {
	bad := func(what string) (holdMsg, error) { return holdMsg{}, fmt.Errorf("%w: %s", errHoldMsg, what) }
	if !isHold(items) {
		return bad("no header")
	}
	h := items[0].Value
	if len(h) < 1 || h[0] < byte(holdPull) || h[0] > byte(lastHoldKind) {
		return bad("kind")
	}
	m := holdMsg{kind: holdKind(h[0])}
	var ok bool
	if m.from, h, ok = readName(h[1:]); !ok || m.from == "" || len(h) != 8 {
		return bad("header")
	}
	m.viewID = binary.LittleEndian.Uint64(h)
	items = items[1:]
	switch m.kind {
	case holdPull:
		if len(items) != 1 || ringlimit.ValidateKey(items[0].Key) != nil {
			return bad("pull of no key")
		}
		m.key = items[0].Key
		v := items[0].Value
		if len(v) < 16 {
			return bad("pull")
		}
		m.want, m.goneInc = binary.LittleEndian.Uint64(v), binary.LittleEndian.Uint64(v[8:])
		if m.gone, v, ok = readName(v[16:]); !ok || len(v) < 1 {
			return bad("pull's gone")
		}
		n := int(v[0])
		v = v[1:]
		for range n {
			var p string
			if p, v, ok = readName(v); !ok {
				return bad("pull's path")
			}
			m.path = append(m.path, p)
		}
		if len(v) != 0 {
			return bad("pull's tail")
		}
	case holdPush:
		for _, it := range items {
			if ringlimit.ValidateKey(it.Key) != nil || len(it.Value) < 8 {
				return bad("push item")
			}
			p := pushItem{key: it.Key, inc: binary.LittleEndian.Uint64(it.Value)}
			var rest []byte
			if p.ver, rest, ok = readVersion(it.Value[8:]); !ok {
				return bad("push item's version")
			}
			st, err := decodeState(rest)
			if err != nil {
				return holdMsg{}, fmt.Errorf("%w: push of %q: %w", errHoldMsg, it.Key, err)
			}
			p.st = st
			m.items = append(m.items, p)
		}
	case holdConfirm:
		for _, it := range items {
			p := pushItem{key: it.Key}
			if ringlimit.ValidateKey(it.Key) != nil || len(it.Value) != 0 && len(it.Value) != versionLen {
				return bad("confirm item")
			}
			if len(it.Value) != 0 {
				p.ver, _, _ = readVersion(it.Value)
			}
			m.items = append(m.items, p)
		}
	case holdDrop:
		for _, it := range items {
			if ringlimit.ValidateKey(it.Key) != nil || len(it.Value) != 0 {
				return bad("drop item")
			}
			m.items = append(m.items, pushItem{key: it.Key})
		}
	case holdDone, holdSettle:
		if len(items) != 0 {
			return bad("done or settle with items")
		}
	}
	return m, nil
}

// settleWord is a member's answer to a settle message: whether it is Idle
// in the view asked about (with its pushes confirmed), and its core's
// Arrivals.
type settleWord struct {
	idle     bool
	arrivals uint64
}

func appendSettleWord(b []byte, w settleWord) []byte {
	idle := byte(0)
	if w.idle {
		idle = 1
	}
	return binary.LittleEndian.AppendUint64(append(b, idle), w.arrivals)
}

// parseSettleWord decodes a settle message's answer. Anything but the
// exact shape is an error (the asker takes it for no word).
func parseSettleWord(b []byte) (settleWord, error) {
	if len(b) != 9 || b[0] > 1 {
		return settleWord{}, fmt.Errorf("%w: settle answer of %d bytes", errHoldMsg, len(b))
	}
	return settleWord{idle: b[0] == 1, arrivals: binary.LittleEndian.Uint64(b[1:])}, nil
}

// appendAnswer encodes a pull's answer.
func appendAnswer(b []byte, a hold.Answer) []byte {
	b = append(b, byte(a.Kind))
	b = appendName(b, a.To)
	b = binary.LittleEndian.AppendUint64(b, a.Inc)
	b = appendVersion(b, a.Ver)
	if a.Kind == hold.State && a.St != nil {
		b = append(b, encodeState(*a.St)...)
	}
	return b
}

// parseAnswer decodes a pull's answer.
func parseAnswer(b []byte) (hold.Answer, error) {
	bad := func(what string) (hold.Answer, error) {
		return hold.Answer{}, fmt.Errorf("%w: answer: %s", errHoldMsg, what)
	}
	if len(b) < 1 || b[0] > byte(hold.Coming) || hold.AnswerKind(b[0]) == hold.Unreachable {
		return bad("kind")
	}
	a := hold.Answer{Kind: hold.AnswerKind(b[0])}
	var ok bool
	if a.To, b, ok = readName(b[1:]); !ok || len(b) < 8 {
		return bad("to")
	}
	if a.Kind == hold.MovedTo && a.To == "" {
		return bad("moved to nobody")
	}
	a.Inc = binary.LittleEndian.Uint64(b)
	if a.Ver, b, ok = readVersion(b[8:]); !ok {
		return bad("version")
	}
	if len(b) > 0 {
		if a.Kind != hold.State {
			return bad("a state in another answer")
		}
		st, err := decodeState(b)
		if err != nil {
			return hold.Answer{}, fmt.Errorf("%w: answer: %w", errHoldMsg, err)
		}
		a.St = &st
	}
	return a, nil
}
