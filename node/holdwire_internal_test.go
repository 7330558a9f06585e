package node

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/hold"
	"github.com/ringlimit/ringlimit/internal/peer"
)

// holdMessages are one message of each kind, as a node sends them.
func holdMessages() []*holdMsg {
	st := ringlimit.State{Algorithm: ringlimit.TokenBucket, Window: 1000, A: 3, B: 1 << 40, Until: 1 << 41}
	ver := hold.Version{Epoch: 1 << 41, Seq: 7, Origins: [3]uint64{1, 2, 3}}
	return []*holdMsg{
		{kind: holdPull, from: "n1", viewID: 9, key: "user:1", want: 5, gone: "n3", goneInc: 6, path: []string{"n2", "n4"}},
		{kind: holdPull, from: "n1", viewID: 9, key: "k", path: []string{}},
		{kind: holdPush, from: "n2", viewID: 9, items: []pushItem{{key: "a", st: st, ver: ver, inc: 4}, {key: "b", st: st, ver: ver}}},
		{kind: holdConfirm, from: "n2", viewID: 9, items: []pushItem{{key: "a", ver: ver}, {key: "b"}}},
		{kind: holdDone, from: "n3", viewID: 11},
		{kind: holdDrop, from: "n4", viewID: 12, items: []pushItem{{key: "c"}}},
		{kind: holdSettle, from: "n5", viewID: 13},
	}
}

// Every message parses back to what was sent.
func TestHoldMessagesRoundTrip(t *testing.T) {
	for _, m := range holdMessages() {
		got, err := parseHold(holdRequest(m).States)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if len(m.path) == 0 {
			m.path = nil
		}
		if !reflect.DeepEqual(&got, m) {
			t.Fatalf("sent %+v, parsed %+v", m, got)
		}
	}
	st := ringlimit.State{Algorithm: ringlimit.FixedWindow, Window: 60000, A: 1, Until: 1 << 41}
	for _, a := range []hold.Answer{
		{Kind: hold.None},
		{Kind: hold.MovedTo, To: "n4", Inc: 8},
		{Kind: hold.State, St: &st, Ver: hold.Version{Epoch: 3, Seq: 1}},
		{Kind: hold.State}, // a state that expired
		{Kind: hold.Mine},
		{Kind: hold.Gone},
		{Kind: hold.Coming},
	} {
		got, err := parseAnswer(appendAnswer(nil, a))
		if err != nil || !reflect.DeepEqual(got, a) {
			t.Fatalf("sent %+v, parsed %+v, %v", a, got, err)
		}
	}
}

// Whatever a peer sends, the parsers return a message or an error: no
// panic, and no message with a key that is not a valid key.
func FuzzParseHold(f *testing.F) {
	for _, m := range holdMessages() {
		r := holdRequest(m)
		f.Add(r.States[0].Value, itemKey(r, 1), itemValue(r, 1), len(r.States)-1)
	}
	f.Add([]byte{0}, "", []byte{}, 0)
	f.Fuzz(func(t *testing.T, head []byte, key string, value []byte, n int) {
		items := []peer.Item{{Key: holdMagic, Value: head}}
		for range n % 4 {
			items = append(items, peer.Item{Key: key, Value: value})
		}
		m, err := parseHold(items)
		if err != nil {
			return
		}
		if m.from == "" {
			t.Fatal("a message from nobody parsed")
		}
		for _, it := range m.items {
			if ringlimit.ValidateKey(it.key) != nil {
				t.Fatalf("item key %q parsed", it.key)
			}
		}
		if m.kind == holdPull && ringlimit.ValidateKey(m.key) != nil {
			t.Fatalf("pull of key %q parsed", m.key)
		}
	})
}

func FuzzParseAnswer(f *testing.F) {
	st := ringlimit.State{Algorithm: ringlimit.SlidingLog, Window: 1000, Log: []ringlimit.LogEntry{{Stamp: 5, Count: 2}}, Until: 1 << 41}
	f.Add(appendAnswer(nil, hold.Answer{Kind: hold.State, St: &st}))
	f.Add(appendAnswer(nil, hold.Answer{Kind: hold.MovedTo, To: "n2"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := parseAnswer(b)
		if err != nil {
			return
		}
		if a.Kind == hold.Unreachable || a.Kind == hold.MovedTo && a.To == "" || a.St != nil && a.Kind != hold.State {
			t.Fatalf("parsed %+v", a)
		}
	})
}

func itemKey(r *peer.Request, i int) string {
	if i < len(r.States) {
		return r.States[i].Key
	}
	return ""
}

func itemValue(r *peer.Request, i int) []byte {
	if i < len(r.States) {
		return r.States[i].Value
	}
	return nil
}

// A Done is kept only where the member says so: one of the release before
// answers nothing, and is told again (it may not have seen the view: the
// upgrade scenario of test/netchaos left its changes unresolved).
func TestDoneKeptOnlyWhenSaid(t *testing.T) {
	for _, tc := range []struct {
		res  peer.Result
		err  error
		kept bool
	}{
		{peer.Result{State: []byte{1}}, nil, true},
		{peer.Result{State: []byte{0}}, nil, false},
		{peer.Result{}, nil, false},
		{peer.Result{State: []byte{1}}, errors.New("timeout"), false},
	} {
		if got := doneKept(tc.res, tc.err); got != tc.kept {
			t.Errorf("doneKept(%v, %v) = %v, want %v", tc.res.State, tc.err, got, tc.kept)
		}
	}
}

// A settle's answer parses back to what was said; anything else is no
// word: an empty answer (a node of the release before), a short or long
// one, an idle byte that is not 0 or 1.
func TestSettleWord(t *testing.T) {
	for _, w := range []settleWord{{idle: true, arrivals: 1 << 40}, {arrivals: 3}, {}} {
		got, err := parseSettleWord(appendSettleWord(nil, w))
		if err != nil || got != w {
			t.Fatalf("%+v parsed as %+v, %v", w, got, err)
		}
	}
	good := appendSettleWord(nil, settleWord{idle: true, arrivals: 9})
	for _, b := range [][]byte{nil, good[:8], append(good, 0), append([]byte{2}, good[1:]...)} {
		if w, err := parseSettleWord(b); !errors.Is(err, errHoldMsg) {
			t.Errorf("%x parsed as %+v, %v", b, w, err)
		}
	}
}

func FuzzParseSettleWord(f *testing.F) {
	f.Add(appendSettleWord(nil, settleWord{idle: true, arrivals: 5}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := parseSettleWord(b)
		if err != nil {
			return
		}
		if !bytes.Equal(appendSettleWord(nil, w), b) {
			t.Fatalf("%x parsed as %+v, which is %x", b, w, appendSettleWord(nil, w))
		}
	})
}
