package main

import (
	"testing"
	"time"
)

// An admitted /v1/allow hit is counted in the fixed window its decision was
// made in, found from ResetAfter and the request's round trip, even when
// the reply arrives long after that window ended.
func TestDecidedWindow(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_000) // a whole second
	for _, c := range []struct {
		sent, recv time.Duration // after base
		resetMS    int64
		want       int64 // window index after base's
	}{
		{0, 0, 1000, 0}, // at the start of window 0
		{940 * time.Millisecond, 950 * time.Millisecond, 50, 0},  // near its end
		{985 * time.Millisecond, 1020 * time.Millisecond, 10, 0}, // decided at 990 ms, received 30 ms later
		{1000 * time.Millisecond, 1001 * time.Millisecond, 999, 1},
		{1300 * time.Millisecond, 1400 * time.Millisecond, 0, 1}, // no ResetAfter (a fallback): the receive time
		{2998 * time.Millisecond, 2999 * time.Millisecond, 1, 2}, // the last millisecond of window 2
		// Replies held by a CPU quota: decided at 990 ms, received 700 ms
		// later (counted in window 1 when the receive time was the guide).
		{900 * time.Millisecond, 1690 * time.Millisecond, 10, 0},
		// decided at 1010 ms, received 600 ms later
		{950 * time.Millisecond, 1610 * time.Millisecond, 990, 1},
		// A round trip of more than a window: decided at 300 ms (the
		// window ends at 1000) or at 1300 ms (at 2000); the end nearest
		// the middle, 1400, is taken.
		{100 * time.Millisecond, 1300 * time.Millisecond, 700, 0},
	} {
		tr := newTraffic(0, 1, 0, []target{{name: "n1", addr: "127.0.0.1:1", up: func() bool { return true }}})
		tr.decided(0, "k", decisionJSON{Allowed: true, ResetAfterMS: c.resetMS, Source: "local"}, base.Add(c.sent), base.Add(c.recv))
		want := checkWindowKey{"k", base.UnixMilli()/checkWindow.Milliseconds() + c.want}
		if got := tr.windowCounts(); got[want] != 1 || len(got) != 1 {
			t.Errorf("sent at +%v, received at +%v with ResetAfter %d ms: counted in %v, want %v", c.sent, c.recv, c.resetMS, got, want)
		}
		if got := tr.windowSources(want); got["local"] != 1 || len(got) != 1 {
			t.Errorf("sources of the window: %v, want local 1", got)
		}
	}
}

// A window over the limit is listed with who decided its hits; one within
// it is not listed.
func TestCheckAllListsSources(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	w := start.UnixMilli() / checkWindow.Milliseconds()
	tr := newTraffic(0, 1, 0, []target{{name: "n1", addr: "127.0.0.1:1", up: func() bool { return true }}})
	at := func(ms int64) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	for i := range checkLimit + 1 {
		src := "peer"
		if i == 0 {
			src = "store"
		}
		tr.decided(0, "over", decisionJSON{Allowed: true, ResetAfterMS: 500, Source: src}, at(500), at(500))
	}
	tr.decided(0, "under", decisionJSON{Allowed: true, ResetAfterMS: 500, Source: "local"}, at(500), at(500))
	c := checkAll(tr.windowCounts(), tr.windowSources, start)
	if c.OverLimit != 1 || len(c.Over) != 1 || c.Over[0].Key != "over" || c.Over[0].window != w {
		t.Fatalf("over: %+v, want the one window of key over", c)
	}
	if got := c.Over[0].Sources; got["store"] != 1 || got["peer"] != checkLimit || len(got) != 2 {
		t.Fatalf("sources of the window over the limit: %v, want store 1, peer %d", got, checkLimit)
	}
}
