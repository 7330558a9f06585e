package main

import (
	"testing"
	"time"
)

// An admitted /v1/allow hit is counted in the fixed window its decision was
// made in, found from ResetAfter, even when the reply arrives after that
// window ended.
func TestDecidedWindow(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_000) // a whole second
	for _, c := range []struct {
		recv    time.Duration // after base
		resetMS int64
		want    int64 // window index after base's
	}{
		{0, 1000, 0},                      // at the start of window 0
		{950 * time.Millisecond, 50, 0},   // near its end
		{1020 * time.Millisecond, 10, 0},  // decided at 990 ms, received 30 ms later
		{1001 * time.Millisecond, 999, 1}, // early in window 1
		{1400 * time.Millisecond, 0, 1},   // no ResetAfter (a fallback): the receive time
		{2999 * time.Millisecond, 1, 2},   // the last millisecond of window 2
	} {
		tr := newTraffic(0, 1, 0, []target{{name: "n1", addr: "127.0.0.1:1", up: func() bool { return true }}})
		tr.decided(0, "k", decisionJSON{Allowed: true, ResetAfterMS: c.resetMS, Source: "local"}, base.Add(c.recv))
		want := checkWindowKey{"k", base.UnixMilli()/checkWindow.Milliseconds() + c.want}
		if got := tr.windowCounts(); got[want] != 1 || len(got) != 1 {
			t.Errorf("received at +%v with ResetAfter %d ms: counted in %v, want %v", c.recv, c.resetMS, got, want)
		}
	}
}
