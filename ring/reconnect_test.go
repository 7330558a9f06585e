package ring

import (
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// bare returns a Membership without memberlist, to drive its bookkeeping.
func bare() *Membership {
	cfg, _ := FastLocalConfig("self").validate()
	m := &Membership{
		cfg:     cfg,
		log:     slog.New(slog.DiscardHandler),
		members: map[string]memberInfo{},
		failed:  map[string]failedMember{},
		leaving: map[string]time.Time{},
		leftInc: map[string]uint64{},
		kick:    make(chan struct{}, 1),
		bcast:   &memberlist.TransmitLimitedQueue{NumNodes: func() int { return 5 }, RetransmitMult: 4},
	}
	return m
}

func node(name string, port int) *memberlist.Node {
	return &memberlist.Node{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: uint16(port), Meta: meta{RPCAddr: "127.0.0.1:1"}.encode()}
}

// A member that disappears without a leave intent is failed and queued for
// reconnecting; one that announced its leave, before or after, is not.
func TestLeftOrFailed(t *testing.T) {
	m := bare()
	ev := (*events)(m)
	for _, n := range []string{"crashed", "polite", "late"} {
		ev.NotifyJoin(node(n, 7000))
	}
	m.handleMsg(newLeaveIntent("polite", 0, nil).Message()) // intent first
	ev.NotifyLeave(node("crashed", 7001))
	ev.NotifyLeave(node("polite", 7002))
	ev.NotifyLeave(node("late", 7003))
	if len(m.members) != 0 {
		t.Fatalf("members after three leaves: %v", m.members)
	}
	if f, ok := m.failed["crashed"]; !ok || f.addr != "127.0.0.1:7001" {
		t.Fatalf("crashed member queued as %+v, %v; want 127.0.0.1:7001", f, ok)
	}
	if _, ok := m.failed["polite"]; ok {
		t.Fatalf("a member that announced its leave is queued for reconnecting")
	}
	if _, ok := m.failed["late"]; !ok {
		t.Fatalf("late: not queued before its intent arrived")
	}
	m.handleMsg(newLeaveIntent("late", 0, nil).Message()) // intent after the leave
	if _, ok := m.failed["late"]; ok {
		t.Fatalf("a leave intent arriving after the leave did not unqueue the member")
	}
	// A member that comes back is no longer failed or leaving.
	ev.NotifyJoin(node("crashed", 7001))
	ev.NotifyJoin(node("polite", 7002))
	if _, ok := m.failed["crashed"]; ok {
		t.Fatalf("a member that came back is still queued")
	}
	if _, ok := m.leaving["polite"]; ok {
		t.Fatalf("a member that came back is still marked leaving")
	}
}

func TestLeaveIntentPassedOnOnce(t *testing.T) {
	m := bare()
	for _, msg := range [][]byte{nil, {msgLeaveIntent}, {9, 'x'}, newLeaveIntent("self", 0, nil).Message()} {
		m.handleMsg(msg) // malformed, foreign, or our own: ignored
	}
	if n := m.bcast.NumQueued(); n != 0 || len(m.leaving) != 0 {
		t.Fatalf("ignored messages queued %d broadcasts, marked %v leaving", n, m.leaving)
	}
	m.handleMsg(newLeaveIntent("x", 0, nil).Message())
	m.handleMsg(newLeaveIntent("x", 0, nil).Message())
	if n := m.bcast.NumQueued(); n != 1 {
		t.Fatalf("an intent received twice queued %d broadcasts, want 1", n)
	}
}

func TestReconnectTargetsBounded(t *testing.T) {
	m := bare()
	now := time.Now()
	ev := (*events)(m)
	for i := range maxRemembered + 10 {
		ev.NotifyLeave(node("n"+strconv.Itoa(i), 10000+i))
	}
	if len(m.failed) != maxRemembered {
		t.Fatalf("remembered %d failed members, want at most %d", len(m.failed), maxRemembered)
	}
	m.leaving["old"] = now.Add(-2 * leaveIntentTTL)
	m.leaving["new"] = now
	if got := m.reconnectTargets(now); len(got) != reconnectsPerRound {
		t.Fatalf("one round tries %d members, want %d", len(got), reconnectsPerRound)
	}
	if _, ok := m.leaving["old"]; ok {
		t.Fatalf("an expired leave intent is kept")
	}
	if _, ok := m.leaving["new"]; !ok {
		t.Fatalf("a fresh leave intent is forgotten")
	}
	if got := m.reconnectTargets(now.Add(m.cfg.ReconnectTimeout + time.Second)); len(got) != 0 {
		t.Fatalf("after ReconnectTimeout a round still tries %q", got)
	}
	if len(m.failed) != 0 {
		t.Fatalf("expired failed members kept: %d", len(m.failed))
	}
}
