package node_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/remote"
)

// downStore is a central store that is down until up is set: its
// decisions and its writes fail. It counts what reaches it.
type downStore struct {
	up        atomic.Bool
	decisions atomic.Int64
	written   atomic.Int64
}

var errDown = errors.New("fake store: down")

func (s *downStore) decide(rule ringlimit.Rule) (ringlimit.Decision, error) {
	s.decisions.Add(1)
	if !s.up.Load() {
		return ringlimit.Decision{}, errDown
	}
	return ringlimit.Decision{Allowed: true, Limit: rule.Limit, Remaining: rule.Limit - 1, Source: ringlimit.Store}, nil
}

func (s *downStore) AllowN(_ context.Context, _ string, rule ringlimit.Rule, _ int64) (ringlimit.Decision, error) {
	return s.decide(rule)
}

func (s *downStore) Peek(_ context.Context, _ string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return s.decide(rule)
}

func (s *downStore) Reset(context.Context, string) error {
	_, err := s.decide(ringlimit.Rule{Limit: 1})
	return err
}

func (s *downStore) WriteStates(_ context.Context, states []remote.KeyState) error {
	if !s.up.Load() {
		return errDown
	}
	s.written.Add(int64(len(states)))
	return nil
}

func (s *downStore) ClaimState(context.Context, string, remote.Claim) (remote.Loaded, error) {
	if !s.up.Load() {
		return remote.Loaded{}, errDown
	}
	return remote.Loaded{}, nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// The write-behind ticks every 10 ms and the breaker's cooldown is 1 s:
	// 10 s is slack for a busy 2-core machine, not a figure under test.
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond) // a poll interval, not a wait for an event
	}
}

// A store that only the write-behind touches (every key is owned here, so
// no decision asks the store) and that is down: the store's breaker opens
// (Stats, and so the metrics and the dashboard, show the store down), the
// failures are logged once and then summarised, and the states wait in the
// queue. When the store is back, a write is the breaker's probe, closes it,
// and the queue drains.
func TestWriteBehindFailuresOpenTheStoreBreaker(t *testing.T) {
	store := new(downStore)
	var logs lockedBuffer
	n, err := node.New(node.Config{Name: "wb", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0", Gossip: node.GossipFast,
		Store: store, WriteBehind: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Hour}
	const keys = 20
	for i := range keys {
		if d, err := n.Allow(context.Background(), "k"+strconv.Itoa(i), rule); err != nil || d.Source != ringlimit.Local {
			t.Fatalf("Allow: %+v, %v", d, err)
		}
	}
	waitUntil(t, "the store breaker opens", func() bool { return n.Stats().Store.State == failover.StateOpen })
	st := n.Stats()
	if store.decisions.Load() != 0 {
		t.Fatalf("%d decisions reached the store: the test wants the write-behind alone to touch it", store.decisions.Load())
	}
	if st.WriteFailures < uint64(failover.DefaultMaxFailures) || st.Store.PrimaryErrors < uint64(failover.DefaultMaxFailures) || st.Store.Opens != 1 {
		t.Fatalf("write failures %d, store errors %d, opens %d", st.WriteFailures, st.Store.PrimaryErrors, st.Store.Opens)
	}
	if q := n.WriteBehindQueue(); q != keys {
		t.Fatalf("%d states queued, want %d", q, keys)
	}
	const line = "write-behind to the store failed"
	if got := strings.Count(logs.String(), line); got != 1 {
		t.Fatalf("%d log lines for %d failed writes, want 1 (then a summary):\n%s", got, st.WriteFailures, logs.String())
	}

	store.up.Store(true)
	waitUntil(t, "the breaker closes and the queue drains", func() bool {
		return n.Stats().Store.State == failover.StateClosed && store.written.Load() >= keys && n.WriteBehindQueue() == 0
	})
	failures := n.Stats().WriteFailures
	n.Close()
	want := line + "; the states stay queued (repeated)\" suppressed=" + strconv.FormatUint(failures-1, 10)
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("no summary of the %d repeats after Close (%q):\n%s", failures-1, want, logs.String())
	}
}
