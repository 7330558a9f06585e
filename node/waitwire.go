package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/ring"
)

// The wait messages travel in the peer link's OpStates frames, as the
// hand-off messages do (holdwire.go): the first item is a header, the
// second the key. The peer link only carries bytes, and a node of the
// release before, which knows no wait message, refuses it as it refuses a
// push it cannot read (ErrClosed): the waiter then waits at the store.
//
//	header:  key waitMagic | value: kind u8 | via (u8 length | bytes)
//	reserve: key | rule | n i64 | by ms i64 (how long from now the hits may act at the latest; -1: no deadline)
//	cancel:  key | rule | ticket (n, t, level, act, epoch: 5 × i64)
//	rule:    algorithm u8 | limit i64 | window ms i64 | burst i64
//
// A reservation's answer is a Result: its Decision, MovedTo as for a call,
// bad input and ErrClosed as Err, and in State: too long u8 (1: the hits
// would act after the deadline; nothing was reserved) | wait ms i64 (until
// they act, or until to ask again) | ticket. Numbers are big endian, as
// the peer link's.
//
// The ticket's epoch (the state it was reserved in: a cancel from another
// gives nothing back) came with waitMagic "\x00wait2". A node of the
// release before sends "\x00wait1" messages, whose tickets have no epoch
// (4 × i64): this node still serves them, answering in their layout, and
// drops their cancels (counted as stale): without an epoch a cancel cannot
// tell the state it came from from a new one. That node refuses a wait2
// message as a push it cannot read: a waiter here then waits at the store.
const (
	waitMagic  = "\x00wait2"
	waitMagic1 = "\x00wait1" // the release before's: tickets without an epoch
)

const (
	waitReserve byte = iota + 1
	waitCancel
)

var errWaitMsg = errors.New("node: malformed wait message")

// waitMsg is one decoded wait message.
type waitMsg struct {
	old    bool // a waitMagic1 message (the release before's layout)
	kind   byte
	via    string
	key    string
	rule   ringlimit.Rule
	n      int64
	by     int64 // ms from now; -1: none
	ticket memstore.Ticket
}

const ruleLen = 1 + 3*8

func appendRule(b []byte, r ringlimit.Rule) []byte {
	b = append(b, byte(r.Algorithm))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Limit))
	b = binary.BigEndian.AppendUint64(b, uint64(r.WindowMillis()))
	return binary.BigEndian.AppendUint64(b, uint64(r.Burst))
}

// appendTicket appends tk, without its epoch if old (waitMagic1).
func appendTicket(b []byte, tk memstore.Ticket, old bool) []byte {
	vs := []int64{tk.N, tk.T, tk.Level, tk.Act, tk.Epoch}
	if old {
		vs = vs[:4]
	}
	for _, v := range vs {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// readTicket reads a ticket of ticketLen bytes, or of ticketLen1 (no
// epoch: zero).
func readTicket(b []byte) memstore.Ticket {
	tk := memstore.Ticket{N: int64(binary.BigEndian.Uint64(b)), T: int64(binary.BigEndian.Uint64(b[8:])),
		Level: int64(binary.BigEndian.Uint64(b[16:])), Act: int64(binary.BigEndian.Uint64(b[24:]))}
	if len(b) >= ticketLen {
		tk.Epoch = int64(binary.BigEndian.Uint64(b[32:]))
	}
	return tk
}

const (
	ticketLen  = 5 * 8
	ticketLen1 = 4 * 8 // waitMagic1's
)

// waitRequest encodes m as a peer request.
func waitRequest(m *waitMsg) *peer.Request {
	h := []byte{m.kind}
	h = appendName(h, m.via)
	v := appendRule(nil, m.rule)
	switch m.kind {
	case waitReserve:
		v = binary.BigEndian.AppendUint64(v, uint64(m.n))
		v = binary.BigEndian.AppendUint64(v, uint64(m.by))
	case waitCancel:
		v = appendTicket(v, m.ticket, m.old)
	}
	magic := waitMagic
	if m.old {
		magic = waitMagic1
	}
	return &peer.Request{Op: peer.OpStates, States: []peer.Item{{Key: magic, Value: h}, {Key: m.key, Value: v}}}
}

// waitCancelRequest is the cancel of the reservation tk of n hits on key.
func waitCancelRequest(key string, rule ringlimit.Rule, tk memstore.Ticket) *peer.Request {
	return waitRequest(&waitMsg{kind: waitCancel, key: key, rule: rule, ticket: tk})
}

// isWait reports whether a push's items are a wait message.
func isWait(items []peer.Item) bool {
	return len(items) > 0 && (items[0].Key == waitMagic || items[0].Key == waitMagic1)
}

// parseWait decodes a wait message. Every byte is the sender's: the key,
// the rule and the hits are checked as a call's are (a message that does
// not parse is refused whole), and a ticket is checked where it is used
// (memstore.CancelTicket).
func parseWait(items []peer.Item) (waitMsg, error) {
	bad := func(what string) (waitMsg, error) { return waitMsg{}, fmt.Errorf("%w: %s", errWaitMsg, what) }
	if !isWait(items) || len(items) != 2 {
		return bad("shape")
	}
	h := items[0].Value
	if len(h) < 1 || h[0] != waitReserve && h[0] != waitCancel {
		return bad("kind")
	}
	m := waitMsg{old: items[0].Key == waitMagic1, kind: h[0], key: items[1].Key}
	var ok bool
	var err error
	if m.via, h, ok = readName(h[1:]); !ok || len(h) != 0 {
		return bad("header")
	}
	v := items[1].Value
	if len(v) < ruleLen {
		return bad("rule")
	}
	if m.rule, err = readRule(v); err != nil {
		return waitMsg{}, err
	}
	v = v[ruleLen:]
	switch m.kind {
	case waitReserve:
		if len(v) != 16 {
			return bad("reserve")
		}
		m.n, m.by = int64(binary.BigEndian.Uint64(v)), int64(binary.BigEndian.Uint64(v[8:]))
		if m.by < -1 {
			return bad("deadline")
		}
		if err := ringlimit.ValidateCall(m.key, m.rule, m.n); err != nil {
			return waitMsg{}, fmt.Errorf("%w: %w", errWaitMsg, err)
		}
	case waitCancel:
		if len(v) != ticketLen && !m.old || len(v) != ticketLen1 && m.old {
			return bad("cancel")
		}
		m.ticket = readTicket(v)
		if err := ringlimit.ValidateCall(m.key, m.rule, 0); err != nil {
			return waitMsg{}, fmt.Errorf("%w: %w", errWaitMsg, err)
		}
	}
	return m, nil
}

// appendWaitAnswer encodes a reservation's answer's State, in waitMagic1's
// layout if old.
func appendWaitAnswer(b []byte, tooLong bool, wait time.Duration, tk memstore.Ticket, old bool) []byte {
	f := byte(0)
	if tooLong {
		f = 1
	}
	b = append(b, f)
	b = binary.BigEndian.AppendUint64(b, uint64(msCeil(wait)))
	return appendTicket(b, tk, old)
}

// parseWaitAnswer decodes the answer to a waitMagic request.
func parseWaitAnswer(b []byte) (tooLong bool, wait time.Duration, tk memstore.Ticket, err error) {
	if len(b) != 1+8+ticketLen || b[0] > 1 {
		return false, 0, tk, fmt.Errorf("%w: answer", errWaitMsg)
	}
	ms := int64(binary.BigEndian.Uint64(b[1:]))
	if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return false, 0, tk, fmt.Errorf("%w: answer's wait", errWaitMsg)
	}
	return b[0] == 1, time.Duration(ms) * time.Millisecond, readTicket(b[9:]), nil
}

// msCeil is d in whole milliseconds, rounded up.
func msCeil(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// askReserve sends a reservation to the member pc is connected to, as ask
// sends a call, and turns its answer into a call's Result (the waitCall
// gets the rest).
func (n *Node) askReserve(ctx context.Context, pc *peerConn, at string, req *peer.Request, w *waitCall) (peer.Result, error) {
	by := int64(-1)
	if !w.by.IsZero() {
		by = max(0, msCeil(w.by.Sub(n.now())))
	}
	res, err := pc.client.Do(ctx, waitRequest(&waitMsg{kind: waitReserve, via: req.From, key: req.Key, rule: req.Rule, n: req.N, by: by}))
	if err != nil || res.Err != nil || res.MovedTo != "" {
		return res, err
	}
	tooLong, wait, tk, err := parseWaitAnswer(res.State)
	if err != nil {
		n.warn.Warn("bad wait answer", "node: bad answer to a reservation", "node", n.name, "from", at, "err", err)
		return peer.Result{}, err
	}
	w.wait, w.ticket, w.holder = wait, tk, at
	if tooLong {
		res.Err = fmt.Errorf("node: wait on %s: would act after the deadline: %w", strconv.Quote(req.Key), ringlimit.ErrWaitTooLong)
	}
	return res, nil
}

// serveWait serves a wait message from a peer: a reservation is decided by
// this node if it holds the key (as a forwarded call is: see Serve), a
// cancel gives the hits back if the key's state is still here.
func (n *Node) serveWait(ctx context.Context, items []peer.Item) peer.Result {
	m, err := parseWait(items)
	if err != nil {
		n.stats.badHold.Add(1)
		n.warn.Warn("bad wait message", "node: bad wait message", "node", n.name, "err", err)
		return peer.Result{Err: err}
	}
	if m.kind == waitCancel {
		n.cancelHere(m.key, m.rule, m.ticket)
		return peer.Result{}
	}
	hh, now := ring.Hash(m.key), n.now()
	if n.closed.Load() {
		n.own.mu.Lock()
		to := n.own.core.Owner(hh)
		n.own.mu.Unlock()
		if to == "" || to == n.name {
			return peer.Result{Err: ringlimit.ErrClosed}
		}
		return peer.Result{MovedTo: to}
	}
	n.stats.served.Add(1)
	w := &waitCall{}
	if m.by >= 0 {
		w.by = now.Add(time.Duration(m.by) * time.Millisecond)
	}
	req := peer.Request{Op: opReserve, Key: m.key, Rule: m.rule, N: m.n, From: m.via}
	d, next, err := n.here(ctx, now, hh, &req, m.via, true, &extra{wait: w})
	switch next {
	case "":
	case toStore:
		return peer.Result{Err: ringlimit.ErrClosed} // nobody to send it to: the caller waits at the store
	default:
		return peer.Result{MovedTo: next}
	}
	if errors.Is(err, ringlimit.ErrWaitTooLong) {
		return peer.Result{Decision: d, State: appendWaitAnswer(nil, true, w.wait, memstore.Ticket{}, m.old)}
	}
	if err != nil {
		return peer.Result{Err: err}
	}
	return peer.Result{Decision: d, State: appendWaitAnswer(nil, false, w.wait, w.ticket, m.old)}
}
