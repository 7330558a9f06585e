package remote_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// WriteStates stores states the scripts continue from, with their TTLs;
// LoadState reads them back; a Connector that is not connected says so.
func TestWriteAndLoadStates(t *testing.T) {
	srv, c := server(t)
	ctx := context.Background()
	at := time.Now()
	clk := testclock.New(at)
	l := remote.New(c, remote.Config{Clock: clk})
	ms := at.UnixMilli()
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 10, Window: time.Minute}
	logState := remote.State{Algorithm: ringlimit.SlidingLog, Window: 60000, Log: []remote.LogEntry{{Stamp: ms - 5, Count: 4}, {Stamp: ms - 1, Count: 3}}}
	fixed := remote.State{Algorithm: ringlimit.FixedWindow, Window: 60000, A: ms / 60000, B: 9}
	err := l.WriteStates(ctx, []remote.KeyState{
		{Key: "log", State: logState, TTL: time.Minute},
		{Key: "fixed", State: fixed, TTL: 30 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, ttl, ok, err := l.LoadState(ctx, "log")
	if err != nil || !ok || !reflect.DeepEqual(got, logState) || ttl <= 59*time.Second || ttl > time.Minute {
		t.Fatalf("LoadState: %+v %v %v %v", got, ttl, ok, err)
	}
	if _, _, ok, err := l.LoadState(ctx, "absent"); ok || err != nil {
		t.Fatalf("LoadState of an absent key: %v %v", ok, err)
	}
	admitted := 0
	for range 5 {
		if d, err := l.AllowN(ctx, "log", rule, 1); err != nil {
			t.Fatal(err)
		} else if d.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("the script admitted %d after a written log of 7 of 10", admitted)
	}
	frule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute}
	if d, _ := l.AllowN(ctx, "fixed", frule, 1); d.Remaining != 0 || !d.Allowed {
		t.Fatalf("after a written count of 9 of 10: %+v", d)
	}

	dead := valkeytest.Start(t)
	dead.Kill()
	k := remote.Connect(remote.Options{Addrs: []string{dead.Addr()}},
		remote.Config{}, remote.ConnectConfig{})
	defer k.Close()
	if err := k.WriteStates(ctx, []remote.KeyState{{Key: "x", State: fixed, TTL: time.Second}}); !errors.Is(err, remote.ErrNotConnected) {
		t.Fatalf("WriteStates before connecting: %v", err)
	}
	if _, _, _, err := k.LoadState(ctx, "x"); !errors.Is(err, remote.ErrNotConnected) {
		t.Fatalf("LoadState before connecting: %v", err)
	}
	srv.Kill()
	if err := l.WriteStates(ctx, []remote.KeyState{{Key: "x", State: fixed, TTL: time.Second}}); err == nil {
		t.Fatal("WriteStates to a dead server succeeded")
	}
}

// A state that matters for centuries (Limit 1, Burst 1e6, Window 24 h)
// has a saturated TTL: it must be written with a long TTL, not round over
// to a negative one and be gone at once.
func TestWriteStatesSaturatedTTL(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{})
	st := remote.State{Algorithm: ringlimit.FixedWindow, Window: 60000, A: time.Now().UnixMilli() / 60000, B: 1}
	if err := l.WriteStates(ctx, []remote.KeyState{{Key: "forever", State: st, TTL: ringlimit.MaxDuration}}); err != nil {
		t.Fatal(err)
	}
	_, ttl, ok, err := l.LoadState(ctx, "forever")
	if err != nil || !ok || ttl < 100*365*24*time.Hour {
		t.Fatalf("LoadState after a saturated TTL: ttl %v, ok %v, err %v; want centuries", ttl, ok, err)
	}
}

// LoadState brings back every index a key holds, each with its own TTL,
// also when index 0 (a short window) has gone and a day's state remains:
// a new owner that loads after a crash must not restart the longer limits.
func TestLoadStateEveryIndex(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{})
	ms := time.Now().UnixMilli()
	second := remote.State{Algorithm: ringlimit.FixedWindow, Window: 1000, A: ms / 1000, B: 10}
	day := remote.State{Algorithm: ringlimit.FixedWindow, Window: 86400000, A: ms / 86400000, B: 999, Index: 1}
	if err := l.WriteStates(ctx, []remote.KeyState{{Key: "k", State: second, TTL: time.Minute},
		{Key: "k", State: day, TTL: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	s, ttl, ok, err := l.LoadState(ctx, "k")
	if err != nil || !ok || ttl <= 59*time.Second || len(s.More) != 1 {
		t.Fatalf("LoadState: %+v ttl %v ok %v err %v; want index 0 and one more", s, ttl, ok, err)
	}
	if m := s.More[0]; m.Index != 1 || m.B != 999 || m.Until <= 59*60*1000 || m.Until > 3600*1000 {
		t.Fatalf("index 1: %+v; want the day's count with its remaining TTL in ms", m)
	}
	if err := c.Do(ctx, c.B().Del().Key(l.Key("k")).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s, ttl, ok, err = l.LoadState(ctx, "k")
	if err != nil || !ok || ttl != 0 || len(s.More) != 1 || s.More[0].B != 999 {
		t.Fatalf("index 0 gone: %+v ttl %v ok %v err %v; want only index 1", s, ttl, ok, err)
	}
}
