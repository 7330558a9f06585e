package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
)

// The hand-off table is the one place that says who holds a key: a key
// given up is answered with its holder (decides nothing here) until a state
// is installed or the window ends; a leaving node sends every key on, and
// after the barrier of handOffAll every state is there for Range. (These
// moved here from package local, which now holds states only.)
func TestHoldersGiveInstallLeave(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	n, err := New(Config{Name: "a", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Hour}
	decide := func(key string, from string) (ringlimit.Decision, string, error) {
		return n.decideHereAll(ctx, &peer.Request{Op: peer.OpAllow, Key: key, Rule: rule, N: 1, From: from}, clk.Now(), nil)
	}
	n.AllowN(ctx, "k", rule, 2)

	res := n.serveTake("k", "b")
	if res.State == nil {
		t.Fatal("take: no state")
	}
	st, err := decodeState(res.State)
	if err != nil || st.B != 2 {
		t.Fatalf("take: %+v, %v; want count 2", st, err)
	}
	if _, to, err := decide("k", ""); to != "b" || err != nil {
		t.Fatalf("after the take: moved to %q, %v; want b", to, err)
	}
	if n.local.Has("k") {
		t.Fatal("a given key still holds a state here")
	}
	// Taken again by the same member: the state left once, and b may have
	// decided on it and passed it on since; an old copy would make a second
	// holder. Nothing, and the key still goes to b.
	if again := n.serveTake("k", "b"); again.State != nil {
		t.Fatal("a second take by the holder got a stale copy")
	}
	if _, to, err := decide("k", ""); to != "b" || err != nil {
		t.Fatalf("after the second take: moved to %q, %v; want b", to, err)
	}
	// Taken by a third member: it is told where the key is.
	if r := n.serveTake("k", "c"); r.MovedTo != "b" || r.State != nil {
		t.Fatalf("take by another member: %+v; want moved to b", r)
	}
	if r := n.serveTake("never", "b"); r.State != nil {
		t.Fatal("take of an absent key returned a state")
	}
	if _, to, _ := decide("never", ""); to != "b" {
		t.Fatalf("after the take of an absent key: moved to %q, want b", to)
	}

	// The holder gives it back: installed, and decided here again. (A
	// state from another member while the holder is in the ring would be a
	// stale retry and dropped: see TestInstallRefusesStaleState.)
	n.install("k", res.State, "b")
	if d, to, err := decide("k", ""); to != "" || err != nil || d.Remaining != 2 {
		t.Fatalf("after the install: %+v, %q, %v; want decided here, 2 left", d, to, err)
	}

	// A call redirected here by the holder takes the key back.
	if d, to, err := decide("never", "b"); to != "" || err != nil || !d.Allowed {
		t.Fatalf("redirected back by its holder: %+v, %q, %v", d, to, err)
	}

	// The window ends: every mark goes.
	n.serveTake("gone", "b")
	n.windowMu.Lock()
	n.windowEnd = time.Now().Add(-time.Second)
	n.windowMu.Unlock()
	n.closeWindow()
	if n.holders.size() != 0 {
		t.Fatalf("%d marks after the window", n.holders.size())
	}
	if _, to, _ := decide("gone", ""); to != "" {
		t.Fatalf("after the window: moved to %q, want decided here", to)
	}

	// Leaving (the last member): nobody to send a key to, the store tier
	// decides; every state is still there for the hand-off.
	n.handOffAll()
	if _, to, _ := decide("other", ""); to != toStore {
		t.Fatalf("leaving: %q, want the store", to)
	}
	keys := 0
	n.local.Range(func(string, local.State) bool { keys++; return true })
	if keys != 3 {
		t.Fatalf("Range after leaving saw %d keys, want 3", keys)
	}
}

// A state that arrives from a member other than the one this node gave the
// key to, while that member is in the ring, is a stale retry of a push this
// node installed and passed on since: installing it would make a second
// holder. From the holder itself, it is the key coming back.
func TestInstallRefusesStaleState(t *testing.T) {
	a, err := New(Config{Name: "a", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0", Gossip: GossipFast})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(Config{Name: "b", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0", Gossip: GossipFast,
		Join: []string{a.GossipAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !a.members.Ring().Contains("b") {
		if time.Now().After(deadline) {
			t.Fatal("b never joined a's ring")
		}
		time.Sleep(5 * time.Millisecond) // polling membership, with a deadline
	}
	ctx := context.Background()
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Hour}
	if _, err := a.local.AllowNAt(a.now(), "k", rule, 2); err != nil {
		t.Fatal(err)
	}
	res := a.serveTake("k", "b")
	if res.State == nil {
		t.Fatal("take: no state")
	}
	a.install("k", res.State, "c")
	if a.local.Has("k") {
		t.Fatal("a state from a member that does not hold the key was installed")
	}
	a.install("k", res.State, "b")
	if !a.local.Has("k") {
		t.Fatal("the key coming back from its holder was not installed")
	}
	if d, to, err := a.decideHereAll(ctx, &peer.Request{Op: peer.OpAllow, Key: "k", Rule: rule, N: 1}, a.now(), nil); to != "" || err != nil || d.Remaining != 2 {
		t.Fatalf("after the key came back: %+v, %q, %v", d, to, err)
	}
}

// A leaving node has sent its own states on already: a push that reaches it
// then is refused, so that its sender keeps the states instead of leaving
// them behind with a node about to stop. Its sender, told so, takes them
// back even though the target is still in the ring.
func TestLeavingNodeRefusesPushes(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	n, err := New(Config{Name: "a", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	st := local.State{Algorithm: ringlimit.FixedWindow, Window: 3_600_000, A: clk.Now().UnixMilli() / 3_600_000, B: 1,
		Until: clk.Now().UnixMilli() + 60_000}
	n.holders.leaving.Store(ringWithout(n.members.Ring(), "a"))
	res := n.serveStates([]peer.Item{n.header(), {Key: "k", Value: encodeState(st)}})
	if !errors.Is(res.Err, ringlimit.ErrClosed) || n.local.Has("k") {
		t.Fatalf("push to a leaving node: %+v, installed %v; want refused, nothing installed", res, n.local.Has("k"))
	}
	n.holders.leaving.Store(nil)
	// The sender's side: a refused batch comes back at once.
	m := &mark{to: "a", addr: "in-ring", st: &st}
	s := n.holders.lock("j")
	n.holders.set(s, "j", m)
	s.unlock()
	n.takeBack("a", []given{{key: "j", st: st, m: m, refused: true}})
	if !n.local.Has("j") {
		t.Fatal("a refused state did not come back")
	}
}

// The table is bounded: beyond its bound a key is no longer marked settled
// (it is pulled again instead), but a key given away is always marked, or
// this node would start it afresh while another holds it.
func TestHoldersBound(t *testing.T) {
	var h holders
	h.init("a", local.New(local.Config{}), 4)
	for i := range 10 {
		k := string(rune('a' + i))
		s := h.lock(k)
		h.set(s, k, &mark{to: "a"})
		s.unlock()
	}
	if h.size() != 4 {
		t.Fatalf("%d settled marks, want the bound 4", h.size())
	}
	s := h.lock("given")
	ok := h.set(s, "given", &mark{to: "b"})
	m := s.get("given")
	s.unlock()
	if !ok || m == nil || m.to != "b" || h.size() != 5 {
		t.Fatalf("a give past the bound: set %v, mark %+v, %d marks", ok, m, h.size())
	}
}

// A rolling restart under -race found a key admitted 32 times over its
// limit: a node that answered a pull kept a copy of the state in its mark
// and served it again when the same member pulled the key later (that
// member had decided on the state, passed it on, lost its mark to the new
// holder when that one restarted, and asked its old source again). The old
// copy made a second holder. A copy of a pushed state, kept until the push
// is confirmed, goes out once too: to a pull that overtook the push, and
// then a failed push does not take it back.
func TestStateCopyLeavesOnce(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	n, err := New(Config{Name: "a", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Hour}

	// A pull's answer: one state, no copy kept.
	n.AllowN(ctx, "pulled", rule, 2)
	if res := n.serveTake("pulled", "b"); res.State == nil {
		t.Fatal("take: no state")
	}
	if res := n.serveTake("pulled", "b"); res.State != nil {
		t.Fatal("a second pull by the same member got the state again")
	}

	// A push's copy, not confirmed yet: the pull that overtook it gets it,
	// once; the failed push then finds nothing to take back.
	n.AllowN(ctx, "pushed", rule, 3)
	s := n.holders.lock("pushed")
	st, ok := n.local.Take("pushed")
	m := &mark{to: "b", at: n.nowMs(), st: &st}
	n.holders.set(s, "pushed", m)
	s.unlock()
	if !ok {
		t.Fatal("no state to push")
	}
	res := n.serveTake("pushed", "b")
	if got, err := decodeState(res.State); err != nil || got.B != st.B {
		t.Fatalf("pull of a pushed key: %+v, %v; want the copy", got, err)
	}
	if res := n.serveTake("pushed", "b"); res.State != nil {
		t.Fatal("the copy went out twice")
	}
	n.takeBack("b", []given{{key: "pushed", st: st, m: m, refused: true}})
	if n.local.Has("pushed") {
		t.Fatal("a failed push took back a copy that a pull had taken: two holders")
	}
}
