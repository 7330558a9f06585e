package node

import (
	"reflect"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/internal/peer"
)

func waitMessages() []*waitMsg {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}
	return []*waitMsg{
		{kind: waitReserve, key: "user:1", rule: rule, n: 3, by: -1},
		{kind: waitReserve, via: "n2", key: "k", rule: rule, n: 1, by: 250},
		{kind: waitCancel, key: "k", rule: rule, ticket: memstore.Ticket{N: 1, T: 1 << 41, Level: 7000, Act: 1<<41 + 100, Epoch: 1<<52 - 1}},
		// The release before's (waitMagic1): a ticket without an epoch.
		{old: true, kind: waitReserve, key: "k", rule: rule, n: 2, by: -1},
		{old: true, kind: waitCancel, key: "k", rule: rule, ticket: memstore.Ticket{N: 1, T: 1 << 41, Level: 7000, Act: 1<<41 + 100}},
	}
}

// Every wait message and answer parses back to what was sent.
func TestWaitMessagesRoundTrip(t *testing.T) {
	for _, m := range waitMessages() {
		got, err := parseWait(waitRequest(m).States)
		if err != nil || !reflect.DeepEqual(&got, m) {
			t.Fatalf("sent %+v, parsed %+v, %v", m, got, err)
		}
	}
	tk := memstore.Ticket{N: 2, T: 5, Level: 6, Act: 7, Epoch: 8}
	for _, tooLong := range []bool{false, true} {
		long, wait, got, err := parseWaitAnswer(appendWaitAnswer(nil, tooLong, 1500*time.Millisecond, tk, false))
		if err != nil || long != tooLong || wait != 1500*time.Millisecond || got != tk {
			t.Fatalf("answer: %v %s %+v %v", long, wait, got, err)
		}
	}
	// An answer in the release before's layout is what that release parses:
	// 1 + 8 + 4 × 8 bytes, the ticket without its epoch.
	if b := appendWaitAnswer(nil, false, time.Second, tk, true); len(b) != 1+8+ticketLen1 || readTicket(b[9:]) != (memstore.Ticket{N: 2, T: 5, Level: 6, Act: 7}) {
		t.Fatalf("old answer: %x", b)
	}
}

// A cancel in the release before's layout names no state: the holder
// drops it, counted, whatever its other fields say.
func TestOldCancelIsDropped(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Hour}
	l := memstore.New(memstore.Config{})
	now := time.UnixMilli(1_000_000)
	l.AllowNAt(now, "k", rule, 10)
	r, _ := l.ReserveN(now, "k", rule, 10, time.Time{})
	tk := r.Ticket()
	m, err := parseWait(waitCancelRequestOld("k", rule, tk).States)
	if err != nil || m.ticket.Epoch != 0 {
		t.Fatalf("old cancel: %+v, %v", m, err)
	}
	l.CancelTicket(now, "k", rule, m.ticket)
	if d, _ := l.AllowNAt(now, "k", rule, 1); d.Allowed || l.Stats().StaleCancels != 1 {
		t.Fatalf("an old cancel gave back: %+v, stale %d", d, l.Stats().StaleCancels)
	}
}

func waitCancelRequestOld(key string, rule ringlimit.Rule, tk memstore.Ticket) *peer.Request {
	return waitRequest(&waitMsg{old: true, kind: waitCancel, key: key, rule: rule, ticket: tk})
}

// Whatever a peer sends, the parsers return a message or an error: no
// panic, and no reservation that is not a valid call.
func FuzzParseWait(f *testing.F) {
	for _, m := range waitMessages() {
		r := waitRequest(m)
		f.Add(r.States[0].Key == waitMagic1, r.States[0].Value, r.States[1].Key, r.States[1].Value)
	}
	f.Fuzz(func(t *testing.T, old bool, head []byte, key string, value []byte) {
		magic := waitMagic
		if old {
			magic = waitMagic1
		}
		m, err := parseWait([]peer.Item{{Key: magic, Value: head}, {Key: key, Value: value}})
		if err != nil {
			return
		}
		if m.old != old || m.old && m.ticket.Epoch != 0 {
			t.Fatalf("parsed %+v from a message in the other layout", m)
		}
		if ringlimit.ValidateCall(m.key, m.rule, 0) != nil {
			t.Fatalf("parsed a message on a bad key or rule: %+v", m)
		}
		if m.kind == waitReserve && (ringlimit.ValidateCall(m.key, m.rule, m.n) != nil || m.by < -1) {
			t.Fatalf("parsed a bad reservation: %+v", m)
		}
	})
}

func FuzzParseWaitAnswer(f *testing.F) {
	f.Add(appendWaitAnswer(nil, false, time.Second, memstore.Ticket{N: 1, Act: 2, Epoch: 3}, false))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, wait, _, err := parseWaitAnswer(b)
		if err == nil && wait < 0 {
			t.Fatalf("parsed a negative wait %s", wait)
		}
	})
}

func leaseMessages() []*leaseMsg {
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 50_000, Window: time.Hour}
	return []*leaseMsg{
		{kind: leaseAsk, from: "n2", key: "hot", rule: rule, n: 64},
		{kind: leaseAsk, from: "n2", key: "hot", rule: rule, n: 128, id: 7, left: 16},
		{kind: leaseBack, from: "n3", key: "hot", rule: rule, n: 12, id: 9},
		{kind: leaseRecall, from: "n1", key: "hot", rule: rule, id: 9},
		{kind: leaseRevoke, from: "n1", key: "hot", rule: rule, id: 10},
	}
}

// Every lease message and answer parses back to what was sent.
func TestLeaseMessagesRoundTrip(t *testing.T) {
	for _, m := range leaseMessages() {
		got, err := parseLease(leaseRequest(m).States)
		if err != nil || !reflect.DeepEqual(&got, m) {
			t.Fatalf("sent %+v, parsed %+v, %v", m, got, err)
		}
	}
	a := leaseAnswer{n: 500, life: 250 * time.Millisecond, id: 3}
	if got, err := parseLeaseAnswer(appendLeaseAnswer(nil, a)); err != nil || got != a {
		t.Fatalf("answer %+v, parsed %+v, %v", a, got, err)
	}
}

// Whatever a peer sends, the lease parsers return a message or an error:
// no panic, and no message on a bad key or rule, from nobody, or with
// negative hits.
func FuzzParseLease(f *testing.F) {
	for _, m := range leaseMessages() {
		r := leaseRequest(m)
		f.Add(r.States[0].Value, r.States[1].Key, r.States[1].Value)
	}
	f.Fuzz(func(t *testing.T, head []byte, key string, value []byte) {
		m, err := parseLease([]peer.Item{{Key: leaseMagic, Value: head}, {Key: key, Value: value}})
		if err != nil {
			return
		}
		if m.from == "" || m.n < 0 || m.left < 0 || ringlimit.ValidateCall(m.key, m.rule, 0) != nil {
			t.Fatalf("parsed %+v", m)
		}
	})
}

func FuzzParseLeaseAnswer(f *testing.F) {
	f.Add(appendLeaseAnswer(nil, leaseAnswer{n: 1, life: time.Second, id: 2}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if a, err := parseLeaseAnswer(b); err == nil && (a.n < 0 || a.life < 0) {
			t.Fatalf("parsed %+v", a)
		}
	})
}
