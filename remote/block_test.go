package remote_test

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/remote"
)

// blockLimit is the largest Limit the exact domain promises for every
// Window up to 24 h (remote/doc.go, "The exact domain").
const blockLimit = 1_000_000

// blockBound is what a script call may hold the server for, measured on the
// server (INFO commandstats), as the least of a few runs of the same call:
// a call that reads a few dozen 16-byte entries takes well under 1 ms, so
// 10 ms leaves room for a loaded 2-core machine, and the least of three
// runs drops the runs the scheduler happened to pause the server in. A call
// that walks a million-entry log takes 250 ms or more.
const blockBound = 10 * time.Millisecond

// logOf returns the stored value of a sliding log of one hit at each of the
// stamps from, from+1, ..., to (ms).
func logOf(window time.Duration, from, to int64) string {
	st := remote.State{Algorithm: ringlimit.SlidingLog, Window: window.Milliseconds()}
	st.Log = make([]remote.LogEntry, 0, to-from+1)
	for s := from; s <= to; s++ {
		st.Log = append(st.Log, remote.LogEntry{Stamp: s, Count: 1})
	}
	return string(remote.EncodeState(st))
}

// scriptTime is the server time spent in scripts so far.
func scriptTime(t testing.TB, c valkey.Client) time.Duration {
	st := commandStats(t, c)
	us := st["evalsha"].usec + st["eval"].usec + st["evalsha_ro"].usec + st["eval_ro"].usec
	return time.Duration(us) * time.Microsecond
}

// pingWhile runs f while another client sends PING after PING, and returns
// the longest a PING waited.
func pingWhile(t testing.TB, pinger valkey.Client, f func()) time.Duration {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var worst time.Duration
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			t0 := time.Now()
			if err := pinger.Do(context.Background(), pinger.B().Ping().Build()).Error(); err != nil {
				t.Errorf("PING: %v", err)
				return
			}
			worst = max(worst, time.Since(t0))
			if i == 0 {
				close(started)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	<-started
	f()
	close(stop)
	wg.Wait()
	return worst
}

// The worst cases of a sliding log at the largest limit (issue 28, finding
// 5): a million hits in the log, one per ms. A denied call must not walk the
// log to find its RetryAfter, and a call that prunes almost all of it must
// not walk what it prunes: each call holds the server for less than
// blockBound, while another client's PING waits. Denials write nothing, so
// each case runs three times on the same value.
func TestSlidingLogNeverBlocks(t *testing.T) {
	srv, c := server(t)
	pinger := dial(t, srv.Addr())
	ctx := context.Background()
	at := time.Date(2026, 9, 10, 11, 12, 13, 0, time.UTC)
	clk := testclock.New(at)
	l := remote.New(c, remote.Config{Clock: clk, Prefix: "block:"})
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: blockLimit, Window: time.Hour}
	now, w := at.UnixMilli(), rule.Window.Milliseconds()
	full := logOf(rule.Window, now-blockLimit+1, now)
	// 995,000 stamps at or before the cutoff, 5,000 after it.
	stale := logOf(rule.Window, now-w-994_999, now-w-1) + ""
	staleState, err := remote.DecodeState([]byte(stale))
	if err != nil {
		t.Fatal(err)
	}
	for s := now - 4999; s <= now; s++ {
		staleState.Log = append(staleState.Log, remote.LogEntry{Stamp: s, Count: 1})
	}
	stale = string(remote.EncodeState(staleState))
	set := func(key, v string) {
		t.Helper()
		if err := c.Do(ctx, c.B().Set().Key(key).Value(v).Px(time.Hour).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	second := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: blockLimit, Window: time.Hour + time.Millisecond}
	bucket := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: blockLimit, Window: time.Hour}
	fullSecond := logOf(second.Window, now-blockLimit+1, now)
	cases := []struct {
		name  string
		setup func()
		call  func() ([]ringlimit.Decision, error)
		check func(ds []ringlimit.Decision) bool
	}{
		{"denied AllowN(1,000,000), full log", func() { set(l.Key("k"), full) },
			func() ([]ringlimit.Decision, error) {
				d, err := l.AllowN(ctx, "k", rule, blockLimit)
				return []ringlimit.Decision{d}, err
			},
			func(ds []ringlimit.Decision) bool { return !ds[0].Allowed && ds[0].RetryAfter == rule.Window }},
		{"denied AllowN(500,000), full log", func() { set(l.Key("k"), full) },
			func() ([]ringlimit.Decision, error) {
				d, err := l.AllowN(ctx, "k", rule, blockLimit/2)
				return []ringlimit.Decision{d}, err
			},
			// The 500,000th stamp must leave: now-500,000 + 1 h - now.
			func(ds []ringlimit.Decision) bool {
				return !ds[0].Allowed && ds[0].RetryAfter == rule.Window-blockLimit/2*time.Millisecond
			}},
		{"denied AllowAll(1,000,000), two full logs", func() { set(l.IndexKey("k", 0), full); set(l.IndexKey("k", 1), fullSecond) },
			func() ([]ringlimit.Decision, error) {
				return l.AllowAll(ctx, "k", []ringlimit.Rule{rule, second}, blockLimit)
			},
			func(ds []ringlimit.Decision) bool {
				return !ds[0].Allowed && !ds[1].Allowed && ds[1].RetryAfter == second.Window
			}},
		// A rule of another algorithm on the key (as the demo's API lets a
		// caller choose) starts it afresh: its peek must not read the log.
		{"Peek under another algorithm, full log", func() { set(l.Key("k"), full) },
			func() ([]ringlimit.Decision, error) {
				d, err := l.Peek(ctx, "k", bucket)
				return []ringlimit.Decision{d}, err
			},
			func(ds []ringlimit.Decision) bool { return ds[0].Allowed && ds[0].Remaining == bucket.Limit }},
		{"AllowAll peek, a full log under another algorithm", func() { set(l.IndexKey("k", 0), full); set(l.IndexKey("k", 1), full) },
			func() ([]ringlimit.Decision, error) {
				return l.AllowAll(ctx, "k", []ringlimit.Rule{rule, bucket}, 0)
			},
			func(ds []ringlimit.Decision) bool {
				return !ds[0].Allowed && ds[1].Allowed && ds[1].Remaining == bucket.Limit
			}},
		{"Peek, 995,000 stale entries", func() { set(l.Key("k"), stale) },
			func() ([]ringlimit.Decision, error) {
				d, err := l.Peek(ctx, "k", rule)
				return []ringlimit.Decision{d}, err
			},
			func(ds []ringlimit.Decision) bool { return ds[0].Allowed && ds[0].Remaining == blockLimit-5000 }},
		{"admitted AllowN(1) pruning 995,000 stale entries", func() { set(l.Key("k"), stale) },
			func() ([]ringlimit.Decision, error) {
				d, err := l.AllowN(ctx, "k", rule, 1)
				return []ringlimit.Decision{d}, err
			},
			func(ds []ringlimit.Decision) bool { return ds[0].Allowed && ds[0].Remaining == blockLimit-5001 }},
	}
	for _, tc := range cases {
		var server []time.Duration
		var ping time.Duration
		for range 3 {
			tc.setup()
			before := scriptTime(t, c)
			var ds []ringlimit.Decision
			var err error
			ping = max(ping, pingWhile(t, pinger, func() { ds, err = tc.call() }))
			if err != nil || !tc.check(ds) {
				t.Fatalf("%s: %+v %v", tc.name, ds, err)
			}
			server = append(server, scriptTime(t, c)-before)
		}
		slices.Sort(server)
		t.Logf("%s: server time %v (least of 3; most %v), longest PING meanwhile %v", tc.name, server[0], server[2], ping)
		if server[0] > blockBound {
			t.Errorf("%s: the call holds the server for %v (least of 3), over %v", tc.name, server[0], blockBound)
		}
	}
}

// The compaction of a full log at the largest limit: 2,004,001 stamps one
// ms apart (32 MB) under a window of 1,000,000 ms, so at the first call
// 1,004,002 have left it and the pruned prefix outweighs the live entries
// (16 MB) by more than the margin a move needs. The admitted calls that
// follow (one stamp leaves each ms, each call adds one) move the live
// entries down to the header in place, 64 KiB a call. The three runs are
// the same calls at the same instants, so the i-th call does the same work
// in each: its least server time over the runs drops the runs the
// scheduler paused the server in, and no call's may exceed blockBound. The
// compacted log holds just the live entries, from the header on.
func TestSlidingLogCompactionNeverBlocks(t *testing.T) {
	srv, c := server(t)
	pinger := dial(t, srv.Addr())
	ctx := context.Background()
	at := time.Date(2026, 9, 10, 11, 12, 13, 0, time.UTC)
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: blockLimit, Window: blockLimit * time.Millisecond}
	now := at.UnixMilli()
	v := logOf(rule.Window, now-2*blockLimit-4000, now)
	var least []time.Duration // by call, over the runs
	var ping time.Duration
	var calls int
	for run := range 3 {
		clk := testclock.New(at)
		l := remote.New(c, remote.Config{Clock: clk, Prefix: "compact-block:"})
		if err := c.Do(ctx, c.B().Set().Key(l.Key("k")).Value(v).Px(time.Hour).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		for calls = 1; ; calls++ {
			if calls > 400 {
				t.Fatalf("no compaction after %d calls", calls)
			}
			clk.Advance(time.Millisecond)
			before := scriptTime(t, c)
			var d ringlimit.Decision
			var err error
			ping = max(ping, pingWhile(t, pinger, func() { d, err = l.AllowN(ctx, "k", rule, 1) }))
			// Each ms one stamp leaves and the call adds one: the log is full.
			if err != nil || !d.Allowed || d.Remaining != 0 {
				t.Fatalf("call %d: %+v %v; want 0 left", calls, d, err)
			}
			took := scriptTime(t, c) - before
			switch {
			case run == 0:
				least = append(least, took)
			case calls > len(least):
				t.Fatalf("run %d took %d calls, the first %d", run, calls, len(least))
			default:
				least[calls-1] = min(least[calls-1], took)
			}
			hdr, err := c.Do(ctx, c.B().Getrange().Key(l.Key("k")).Start(0).End(72).Build()).AsBytes()
			if err != nil || len(hdr) != 73 {
				t.Fatalf("header: %x %v", hdr, err)
			}
			if head := binary.LittleEndian.Uint64(hdr[17:]); head < 1<<20 {
				break // moved down
			}
		}
		if calls != len(least) {
			t.Fatalf("run %d took %d calls, the first %d", run, calls, len(least))
		}
		raw, err := c.Do(ctx, c.B().Get().Key(l.Key("k")).Build()).AsBytes()
		if err != nil {
			t.Fatal(err)
		}
		st, err := remote.DecodeState(raw)
		if err != nil {
			t.Fatal(err)
		}
		// What the calls pruned meanwhile stays as a short dead prefix; the
		// value keeps its length, with the entries each call but the last
		// added while the move ran (the rest is free space).
		if len(st.Log) != blockLimit || len(raw) != len(v)+16*(calls-1) {
			t.Fatalf("compacted to %d entries in %d bytes; want 1,000,000 in %d", len(st.Log), len(raw), len(v)+16*(calls-1))
		}
	}
	worst := slices.Index(least, slices.Max(least))
	t.Logf("compaction over %d calls: longest call %v (call %d, least of 3 runs), longest PING meanwhile %v", calls, least[worst], worst+1, ping)
	if least[worst] > blockBound {
		t.Errorf("call %d of the compaction holds the server for %v (least of 3 runs), over %v", worst+1, least[worst], blockBound)
	}
}
