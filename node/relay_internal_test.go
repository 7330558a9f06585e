package node

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/hold"
	"github.com/ringlimit/ringlimit/internal/testclock"
)

// A state forked in a hand-off is never taken for a late copy of its other
// branch. The sequence, seen in TestRollingRestartUnderLoad beside eight
// busy loops (a sliding log admitted 128 of 100, with no fail-open):
//
//  1. n1 leaves and pushes key k to n4, version V.
//  2. n2 (k's owner in its view) pulls k from n4 before the push arrives:
//     n4 holds nothing and answers None (its mark: n2 holds k).
//  3. n2 asks n1 again, naming n4 gone: n1's copy is the state, and goes
//     to n2. The state has forked: the push is still on its way. n2
//     decides on its branch, then its view gives k to n4, and it pushes
//     its state there.
//  4. n1's push reaches n4, which passes it on to n2 (its mark), raising
//     its version. n2 has passed its own on since, and drops this older
//     branch (confirming it).
//  5. n2's push reaches n4. Compared by epochs alone, n4's relay was as
//     new as n2's branch (the clocks agree to the millisecond, or n4's is
//     ahead), so n4 dropped n2's state as a late copy: both dropped the
//     state, and the next call started k afresh.
//
// The copy served in 3 now carries an origin of its own (hold.Version.Fork),
// so n4 knows n2's branch for one its relay does not cover. This test is
// node n4; p1 and p2 play n1 and n2.
func TestForkedStateIsNotTakenForALateCopy(t *testing.T) {
	for _, lag := range []time.Duration{0, 5 * time.Millisecond} {
		t.Run("p2's clock behind by "+lag.String(), func(t *testing.T) {
			clk := testclock.New(time.UnixMilli(1_800_000_000_000))
			n := soloNode(t, clk)
			const key = "k"
			st := ringlimit.State{Algorithm: ringlimit.SlidingLog, Window: 3_600_000, A: 40, Until: clk.Now().Add(time.Hour).UnixMilli()}
			v := hold.Fresh(clk.Now().UnixMilli()-1000, 77).Next(clk.Now().UnixMilli() - 10)

			// 2. p2 pulls k: nothing here.
			if a := n.serveAnswer(t, &holdMsg{kind: holdPull, from: "p2", key: key}); a.Kind != hold.None {
				t.Fatalf("the pull got %+v, want None", a)
			}
			// 4. p1's push arrives and goes on to p2, which confirms it (it
			// drops it: it passed its own branch on).
			n.serveOK(t, &holdMsg{kind: holdPush, from: "p1", items: []pushItem{{key: key, st: st, ver: v}}})
			if n.local.Has(key) {
				t.Fatal("p1's state stayed here; it should have gone on to p2")
			}
			n.serveOK(t, &holdMsg{kind: holdConfirm, from: "p2", items: []pushItem{{key: key}}})
			// 5. p2's branch, decided on since, comes here: the copy p1
			// served it was a fork of v.
			decided := st
			decided.A = 90
			fork := v.Fork(12345).Next(clk.Now().Add(-lag).UnixMilli())
			n.serveOK(t, &holdMsg{kind: holdPush, from: "p2", items: []pushItem{{key: key, st: decided, ver: fork}}})
			if !n.local.Has(key) {
				t.Fatal("p2's branch was dropped as a late copy of the one passed on: no member holds k")
			}
		})
	}
}

// A node that serves the copy of a push still on its way (its receiver
// named gone by the asker) serves it as a fork: with an origin the push
// does not count (step 3 above).
func TestCopyServedForAGoneReceiverIsAFork(t *testing.T) {
	clk := testclock.New(time.UnixMilli(1_800_000_000_000))
	n := soloNode(t, clk)
	const key = "k"
	st := ringlimit.State{Algorithm: ringlimit.FixedWindow, Window: 3_600_000, A: 500, B: 3, Until: clk.Now().Add(time.Hour).UnixMilli()}
	v := hold.Fresh(clk.Now().UnixMilli()-1000, 77)
	// A mark with a copy: p2 asked first (None), then p1's push came and
	// was passed on to p2, which is not a member (the push stays given).
	if a := n.serveAnswer(t, &holdMsg{kind: holdPull, from: "p2", key: key}); a.Kind != hold.None {
		t.Fatalf("the pull got %+v, want None", a)
	}
	n.serveOK(t, &holdMsg{kind: holdPush, from: "p1", items: []pushItem{{key: key, st: st, ver: v}}})
	n.own.begin()
	_, pushed, ok := n.own.core.Pending(key, "p2")
	n.own.end()
	if !ok {
		t.Fatal("no copy kept for the push to p2")
	}
	a := n.serveAnswer(t, &holdMsg{kind: holdPull, from: "p3", key: key, gone: "p2"})
	if a.Kind != hold.State || a.St == nil {
		t.Fatalf("p3, naming p2 gone, got %+v; want the copy", a)
	}
	if !a.Ver.Covers(pushed) || pushed.Covers(a.Ver) {
		t.Fatalf("the copy served has version %+v, the push %+v: want a fork (an origin the push does not count)", a.Ver, pushed)
	}
}

// soloNode is a node alone in its ring, on loopback, closed with the test.
func soloNode(t *testing.T, clk ringlimit.Clock) *Node {
	t.Helper()
	n, err := New(Config{Name: "n4", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// serveAnswer serves a pull and returns its answer.
func (n *Node) serveAnswer(t *testing.T, m *holdMsg) hold.Answer {
	t.Helper()
	res := n.serveHold(holdRequest(m).States)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	a, err := parseAnswer(res.State)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// serveOK serves a message that must not be refused.
func (n *Node) serveOK(t *testing.T, m *holdMsg) {
	t.Helper()
	res := n.serveHold(holdRequest(m).States)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	for i, r := range res.State {
		if m.kind == holdPush && r != 0 {
			t.Fatalf("item %d refused (%d)", i, r)
		}
	}
}
