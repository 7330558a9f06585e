package remote_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
)

// A long sliding log on one key, against local: thousands of distinct
// milliseconds, so pruning and the RetryAfter search go past the first
// entries read in one piece and the value is compacted many times. After
// every call the stored value must decode, and its dead prefix must stay
// bounded. The scripts run as shipped (every compaction rewrites the few
// live entries at once) and tuned (2 entries read in one piece, so every
// search halves; 64 bytes moved a call, so most compactions move the live
// entries down in place over many calls).
func TestSlidingLogLong(t *testing.T) {
	for _, tuned := range []bool{false, true} {
		t.Run(map[bool]string{false: "shipped", true: "tuned"}[tuned], func(t *testing.T) { testSlidingLogLong(t, tuned) })
	}
}

func testSlidingLogLong(t *testing.T, tuned bool) {
	_, c := server(t)
	ctx := context.Background()
	clk := testclock.New(time.Date(2026, 7, 8, 9, 10, 11, 0, time.UTC))
	loc := local.New(local.Config{Clock: clk})
	rem := remote.New(c, remote.Config{Clock: clk, Prefix: "long:"})
	remote.SetTTLPad(rem, 3600_000)
	const chunk = 64
	if tuned {
		remote.SetLogTuning(rem, 3600_000, 2, chunk)
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 300, Window: 400 * time.Millisecond}
	rng := rand.New(rand.NewPCG(7, 7))
	var admitted, denied, maxLen, compactions, moving int
	var lastHead uint64
	for i := range 6000 {
		step := time.Duration(rng.IntN(4)) * time.Millisecond
		if rng.IntN(200) == 0 {
			step = time.Duration(100+rng.IntN(300)) * time.Millisecond // prune many chunks at once
		}
		clk.Advance(step)
		var n int64
		switch x := rng.IntN(100); {
		case x < 5:
			n = 0
		case x < 10:
			n = 50 + rng.Int64N(250) // deep RetryAfter scans
		default:
			n = 1 + rng.Int64N(2)
		}
		dl, el := loc.AllowN(ctx, "k", rule, n)
		dr, er := rem.AllowN(ctx, "k", rule, n)
		if el != nil || er != nil {
			t.Fatalf("step %d: %v %v", i, el, er)
		}
		dr.Source = dl.Source
		if dl != dr {
			t.Fatalf("step %d n=%d:\nlocal  %+v\nremote %+v", i, n, dl, dr)
		}
		if n > 0 && dl.Allowed {
			admitted++
		} else if !dl.Allowed {
			denied++
		}
		raw, err := c.Do(ctx, c.B().Get().Key(rem.Key("k")).Build()).AsBytes()
		if valkey.IsValkeyNil(err) && dl.Remaining == rule.Limit {
			continue // nothing recorded yet
		}
		if err != nil {
			t.Fatal(err)
		}
		st, err := remote.DecodeState(raw)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		var held int64
		for _, e := range st.Log {
			held += e.Count
		}
		if held > rule.Limit || held < rule.Limit-dl.Remaining {
			t.Fatalf("step %d: the value holds %d stamps; the decision says %d remain", i, held, dl.Remaining)
		}
		maxLen = max(maxLen, len(raw))
		// A compaction ends when head moves down (a format 2 header: head
		// at 17, src at 57).
		head := binary.LittleEndian.Uint64(raw[17:])
		if head < lastHead {
			compactions++
		}
		if binary.LittleEndian.Uint64(raw[57:]) != 0 {
			moving++
		}
		lastHead = head
	}
	t.Logf("%d admitted, %d denied, %d compactions, %d calls ended mid-move, longest value %d bytes", admitted, denied, compactions, moving, maxLen)
	if compactions < 10 || denied < 100 || tuned && moving < 100 {
		t.Errorf("too tame: %d compactions, %d calls mid-move, %d denied", compactions, moving, denied)
	}
	// Live entries at most Limit; dead ones at most max(1024 bytes, live +
	// the margin, an entry for each call a move may take) when a
	// compaction starts, and while it moves them one entry more a call.
	ch := 65536
	if tuned {
		ch = chunk
	}
	limit := 73 + 2*16*300 + 1024 + 16 + 2*16*(16*300/(ch-16)+2)
	if maxLen > limit {
		t.Errorf("value grew to %d bytes, over %d", maxLen, limit)
	}
}

// A format 1 log (the previous release's, which its nodes still write
// during a rolling upgrade) is read, and the first call that admits
// rewrites its live entries in format 2, in both cases: the call's hits in
// a new ms, and in the newest entry's ms (that entry's count grows in the
// rewritten value). The test writes the log itself: 70 pruned entries, then
// 30 live ones of 1 hit each, the newest now.
func TestSlidingLogFormat1(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	le := binary.LittleEndian
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 1000, Window: 100 * time.Millisecond}
	for _, sameMs := range []bool{false, true} {
		clk := testclock.New(time.Date(2026, 7, 8, 9, 10, 11, 0, time.UTC))
		rem := remote.New(c, remote.Config{Clock: clk, Prefix: "compact:"})
		now := clk.Now().UnixMilli()
		v := []byte{byte(ringlimit.SlidingLog)}
		for _, x := range []int64{100, 30, 57 + 70*16, 57 + 100*16, now - 29, now, 1} {
			v = le.AppendUint64(v, uint64(x))
		}
		for i := range int64(100) {
			stamp := now - 200 + i // pruned
			if i >= 70 {
				stamp = now - 99 + i // live: now-29 ... now
			}
			v = le.AppendUint64(le.AppendUint64(v, uint64(stamp)), 1)
		}
		if err := c.Do(ctx, c.B().Set().Key(rem.Key("k")).Value(string(v)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		// Read as it is: 30 live hits; a denial waits for the 10th to leave
		// (now-20 + 100 ms) and leaves the value in format 1.
		if d, err := rem.AllowN(ctx, "k", rule, 980); err != nil || d.Allowed || d.RetryAfter != 80*time.Millisecond || d.Remaining != 970 {
			t.Fatalf("same ms %v: a denial on format 1: %+v %v", sameMs, d, err)
		}
		if raw, _ := c.Do(ctx, c.B().Get().Key(rem.Key("k")).Build()).AsBytes(); string(raw) != string(v) {
			t.Fatalf("same ms %v: a denial changed the value", sameMs)
		}
		if !sameMs {
			clk.Advance(time.Millisecond)
		}
		sets := commandStats(t, c)["set"].calls
		if d, err := rem.AllowN(ctx, "k", rule, 3); err != nil || !d.Allowed || d.Remaining != 1000-33 {
			t.Fatalf("same ms %v: %+v %v; want 967 left", sameMs, d, err)
		}
		if commandStats(t, c)["set"].calls != sets+1 {
			t.Fatalf("same ms %v: the call did not rewrite the value", sameMs)
		}
		raw, err := c.Do(ctx, c.B().Get().Key(rem.Key("k")).Build()).AsBytes()
		if err != nil {
			t.Fatal(err)
		}
		st, err := remote.DecodeState(raw)
		if err != nil {
			t.Fatalf("same ms %v: %v", sameMs, err)
		}
		var held int64
		for _, e := range st.Log {
			held += e.Count
		}
		want := 31
		if sameMs {
			want = 30
		}
		if held != 33 || len(st.Log) != want || len(raw) != 73+16*want || raw[0] != 131 {
			t.Fatalf("same ms %v: the rewritten value (%d bytes) holds %d hits in %d entries, want 33 in %d", sameMs, len(raw), held, len(st.Log), want)
		}
		// Once the 29 older live entries have left, the 4 hits of the last
		// two ms (or of the last one) remain.
		clk.Set(time.UnixMilli(now + 99))
		if d, err := rem.Peek(ctx, "k", rule); err != nil || d.Remaining != 996 {
			t.Fatalf("same ms %v: %+v %v; want 996 left", sameMs, d, err)
		}
	}
}

// AllowAll's script holds a log's writes until every rule has decided, the
// writes of a move among them: two sliding logs on one key, against local,
// with the scripts tuned so that most compactions move entries down over
// many calls (as in TestSlidingLogLong). After every call both stored
// values decode, and moves happen at both indexes.
func TestSlidingLogAllowAllMoves(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	clk := testclock.New(time.Date(2026, 7, 8, 9, 10, 11, 0, time.UTC))
	loc := local.New(local.Config{Clock: clk})
	rem := remote.New(c, remote.Config{Clock: clk, Prefix: "allmoves:"})
	remote.SetLogTuning(rem, 3600_000, 2, 64)
	rules := []ringlimit.Rule{
		{Algorithm: ringlimit.SlidingLog, Limit: 300, Window: 400 * time.Millisecond},
		{Algorithm: ringlimit.SlidingLog, Limit: 200, Window: 250 * time.Millisecond},
	}
	rng := rand.New(rand.NewPCG(8, 8))
	var moving [2]int
	var admitted, denied int
	for i := range 4000 {
		clk.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
		var n int64
		switch x := rng.IntN(100); {
		case x < 5:
			n = 0
		case x < 10:
			n = 20 + rng.Int64N(150)
		default:
			n = 1 + rng.Int64N(2)
		}
		dl, el := loc.AllowAll(ctx, "k", rules, n)
		dr, er := rem.AllowAll(ctx, "k", rules, n)
		if el != nil || er != nil {
			t.Fatalf("step %d: %v %v", i, el, er)
		}
		for j := range dl {
			dr[j].Source = dl[j].Source
			if dl[j] != dr[j] {
				t.Fatalf("step %d n=%d rule %d:\nlocal  %+v\nremote %+v", i, n, j, dl[j], dr[j])
			}
		}
		if dl[0].Allowed && dl[1].Allowed && n > 0 {
			admitted++
		} else if !dl[0].Allowed || !dl[1].Allowed {
			denied++
		}
		for j := range rules {
			raw, err := c.Do(ctx, c.B().Get().Key(rem.IndexKey("k", j)).Build()).AsBytes()
			if valkey.IsValkeyNil(err) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := remote.DecodeState(raw); err != nil {
				t.Fatalf("step %d, index %d: %v", i, j, err)
			}
			if binary.LittleEndian.Uint64(raw[57:]) != 0 {
				moving[j]++
			}
		}
	}
	t.Logf("%d admitted, %d denied, calls ended mid-move at each index: %v", admitted, denied, moving)
	if moving[0] < 50 || moving[1] < 50 || denied < 100 {
		t.Errorf("too tame: %d denied, %v calls mid-move", denied, moving)
	}
}

// Running counts are kept modulo 2^52, and a log whose counts wrap past it
// decides as any other: a log written by hand with base 2^52-5 and three
// entries of 3, 4 and 2 hits (running counts 2^52-2, 2, 4).
func TestSlidingLogRunningCountsWrap(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	le := binary.LittleEndian
	const m = 1 << 52
	at := time.Date(2026, 7, 8, 9, 10, 11, 0, time.UTC)
	clk := testclock.New(at)
	rem := remote.New(c, remote.Config{Clock: clk, Prefix: "wrap:"})
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 10, Window: 100 * time.Millisecond}
	now := at.UnixMilli()
	v := le.AppendUint64([]byte{131}, 100)
	for _, x := range []int64{9, 73, 73 + 3*16, now - 50, now - 10, m - 5, 0, 0, now - 50, m - 2, now - 30, 2, now - 10, 4} {
		v = le.AppendUint64(v, uint64(x))
	}
	want := []remote.LogEntry{{Stamp: now - 50, Count: 3}, {Stamp: now - 30, Count: 4}, {Stamp: now - 10, Count: 2}}
	if st, err := remote.DecodeState(v); err != nil || fmt.Sprint(st.Log) != fmt.Sprint(want) {
		t.Fatalf("DecodeState: %+v %v; want %v", st, err, want)
	}
	if err := c.Do(ctx, c.B().Set().Key(rem.Key("k")).Value(string(v)).Px(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at        int64 // ms after now
		n         int64
		allowed   bool
		remaining int64
		retry     time.Duration
	}{
		{0, 2, false, 1, 50 * time.Millisecond}, // the first 3 hits must leave: at now-50+100
		{55, 0, true, 4, 0},                     // they have: 6 left in the log
		{55, 4, true, 0, 0},
		{56, 1, false, 0, 14 * time.Millisecond}, // the first of now-30: at now+70
	}
	for _, s := range steps {
		clk.Set(time.UnixMilli(now + s.at))
		d, err := rem.AllowN(ctx, "k", rule, s.n)
		if err != nil || d.Allowed != s.allowed || d.Remaining != s.remaining || d.RetryAfter != s.retry {
			t.Fatalf("at +%d ms, n %d: %+v %v; want allowed %v, %d left, retry %v", s.at, s.n, d, err, s.allowed, s.remaining, s.retry)
		}
	}
	raw, err := c.Do(ctx, c.B().Get().Key(rem.Key("k")).Build()).AsBytes()
	if err != nil {
		t.Fatal(err)
	}
	want = []remote.LogEntry{{Stamp: now - 30, Count: 4}, {Stamp: now - 10, Count: 2}, {Stamp: now + 55, Count: 4}}
	if st, err := remote.DecodeState(raw); err != nil || fmt.Sprint(st.Log) != fmt.Sprint(want) {
		t.Fatalf("stored %+v %v; want %v", st, err, want)
	}
	if got := le.Uint64(raw[9+8*5:]); got != m-2 { // base: the running count before the new head
		t.Fatalf("base %d, want 2^52-2", got)
	}
}

// A log whose every stamp has left the window starts over: a value of at
// most 4 MiB is written afresh (a free that small is cheap), a larger one
// in place, keeping its length (freeing it held the server for ms), and
// both then decide and decode as a fresh log.
func TestSlidingLogStartsOverInPlace(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	at := time.Date(2026, 7, 8, 9, 10, 11, 0, time.UTC)
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 1_000_000, Window: time.Second}
	now := at.UnixMilli()
	for _, tc := range []struct {
		entries int64
		inPlace bool
	}{{1000, false}, {300_000, true}} { // 16 KB and 4.8 MB
		clk := testclock.New(at)
		rem := remote.New(c, remote.Config{Clock: clk, Prefix: "over:"})
		v := logOf(rule.Window, now-2000-tc.entries, now-2001)
		if err := c.Do(ctx, c.B().Set().Key(rem.Key("k")).Value(v).Px(time.Minute).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if d, err := rem.AllowN(ctx, "k", rule, 3); err != nil || !d.Allowed || d.Remaining != rule.Limit-3 {
			t.Fatalf("%d entries: %+v %v", tc.entries, d, err)
		}
		raw, err := c.Do(ctx, c.B().Get().Key(rem.Key("k")).Build()).AsBytes()
		if err != nil {
			t.Fatal(err)
		}
		want := 73 + 16
		if tc.inPlace {
			want = len(v)
		}
		st, err := remote.DecodeState(raw)
		if err != nil || len(raw) != want || len(st.Log) != 1 || st.Log[0] != (remote.LogEntry{Stamp: now, Count: 3}) {
			t.Fatalf("%d entries: %d bytes (want %d), %+v %v", tc.entries, len(raw), want, st.Log, err)
		}
		if pttl, _ := c.Do(ctx, c.B().Pttl().Key(rem.Key("k")).Build()).AsInt64(); pttl <= 0 {
			t.Fatalf("%d entries: TTL %d", tc.entries, pttl)
		}
		clk.Advance(time.Millisecond)
		if d, err := rem.AllowN(ctx, "k", rule, 2); err != nil || !d.Allowed || d.Remaining != rule.Limit-5 {
			t.Fatalf("%d entries, then: %+v %v", tc.entries, d, err)
		}
	}
}
