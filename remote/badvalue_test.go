package remote_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/remote"
)

// callTimeout bounds every call of these tests: a store timeout with room
// for a loaded test machine. A script that loops would hold the server far
// longer (Redis answers BUSY only after 5 s).
const callTimeout = 250 * time.Millisecond

// realValues returns, for each algorithm, a rule, the clock a call must be
// made at to read (and prune) the stored value, and the value itself as the
// scripts stored it after a run of calls. The sliding log's has a pruned
// prefix (head past the header) and live entries on both sides of the cutoff.
func realValues(t testing.TB, c valkey.Client) map[ringlimit.Algorithm]struct {
	rule  ringlimit.Rule
	at    time.Time
	value string
} {
	t.Helper()
	ctx := context.Background()
	out := map[ringlimit.Algorithm]struct {
		rule  ringlimit.Rule
		at    time.Time
		value string
	}{}
	for _, alg := range algorithms {
		clk := testclock.New(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
		l := remote.New(c, remote.Config{Clock: clk, Prefix: "real:"})
		remote.SetTTLPad(l, 3600_000)
		rule := ringlimit.Rule{Algorithm: alg, Limit: 100, Window: 100 * time.Millisecond}
		for i := range 400 {
			clk.Advance(time.Millisecond)
			if _, err := l.AllowN(ctx, "k", rule, 1+int64(i%2)); err != nil {
				t.Fatal(err)
			}
		}
		v, err := c.Do(ctx, c.B().Get().Key(l.Key("k")).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		out[alg] = struct {
			rule  ringlimit.Rule
			at    time.Time
			value string
		}{rule, clk.Now().Add(50 * time.Millisecond), v}
	}
	if log := out[ringlimit.SlidingLog].value; binary.LittleEndian.Uint64([]byte(log[17:])) == 73 {
		t.Fatal("the sliding log has no pruned prefix: the test would miss that path")
	}
	return out
}

// mutations returns truncated, bit-flipped and length-inflated versions of v.
func mutations(v string, rng *rand.Rand) map[string]string {
	out := map[string]string{}
	for n := range len(v) {
		if n <= 80 || n%7 == 0 || n%16 <= 1 {
			out[fmt.Sprintf("truncated to %d", n)] = v[:n]
		}
	}
	flip := func(bit int) {
		b := []byte(v)
		b[bit/8] ^= 1 << (bit % 8)
		out[fmt.Sprintf("bit %d flipped", bit)] = string(b)
	}
	for bit := range min(len(v), 73) * 8 {
		flip(bit)
	}
	for range 200 {
		flip(rng.IntN(len(v) * 8))
	}
	for _, n := range []int{1, 8, 15, 16, 17, 48, 4096} {
		out[fmt.Sprintf("%d zero bytes appended", n)] = v + string(make([]byte, n))
		out[fmt.Sprintf("%d 0xff bytes appended", n)] = v + string(bytesOf(n, 0xff))
	}
	// Header fields of a sliding log (and whatever sits there in the others).
	field := func(name string, off int, val uint64) {
		if off+8 > len(v) {
			return
		}
		b := []byte(v)
		binary.LittleEndian.PutUint64(b[off:], val)
		out[name] = string(b)
	}
	le := binary.LittleEndian
	if len(v) >= 57 {
		total, head, size := le.Uint64([]byte(v[9:])), le.Uint64([]byte(v[17:])), le.Uint64([]byte(v[25:]))
		field("head at the end (the reported hang)", 17, size)
		field("head past the end", 17, size+16)
		field("head far past the end", 17, 1<<40)
		field("head inside the header", 17, 9)
		field("head misaligned", 17, head+1)
		field("size inflated", 25, size+16)
		field("size huge", 25, 1<<62)
		field("total huge", 9, 1<<62)
		field("total one more", 9, total+1)
		field("total zero", 9, 0)
		field("newest in the future", 41, 1<<52)
		field("negative total", 9, 1<<63)
		hdr := 57
		if v[0] == 131 { // format 2: base, src and moved follow
			hdr = 73
			field("base 2^52", 49, 1<<52)
			field("base huge", 49, 1<<62)
			field("src without moved", 57, head)
			field("moved without src", 65, head)
			field("moved past the end", 65, size+16)
			field("moved huge", 65, 1<<62)
			b := []byte(v)
			le.PutUint64(b[57:], head)
			le.PutUint64(b[65:], size)
			out["a move that would write over live entries"] = string(b)
			b = []byte(v)
			le.PutUint64(b[57:], 73)
			le.PutUint64(b[65:], 73)
			out["a move from the header"] = string(b)
			b = []byte(v)
			le.PutUint64(b[25:], size-16)
			out["size short of the length (free space)"] = string(b)
			b = []byte(v)
			le.PutUint64(b[25:], size+4096)
			out["size past free space"] = string(b) + string(make([]byte, 16))
		}
		// Length-inflated: many entries that all left the window, under a
		// header that says the newest is still in it.
		b := []byte(v[:hdr])
		for i := range 4096 {
			b = le.AppendUint64(b, uint64(i+1))
			b = le.AppendUint64(b, uint64(i+1)) // a running count in format 2
		}
		if hdr == 57 {
			for i := range 4096 {
				le.PutUint64(b[hdr+16*i+8:], 1)
			}
		}
		le.PutUint64(b[25:], uint64(len(b)))
		le.PutUint64(b[17:], uint64(hdr))
		out["4096 stale entries, live newest"] = string(b)
	}
	out["window zero"] = v[:1] + string(make([]byte, 8)) + v[9:]
	out["unknown algorithm"] = "\x09" + v[1:]
	return out
}

// movingLog returns a sliding log value that the scripts (tuned to move 64
// bytes a call) left in the middle of a move: src and moved set, some
// entries already copied down to the header.
func movingLog(t testing.TB, c valkey.Client) struct {
	rule  ringlimit.Rule
	at    time.Time
	value string
} {
	t.Helper()
	ctx := context.Background()
	clk := testclock.New(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	l := remote.New(c, remote.Config{Clock: clk, Prefix: "moving:"})
	remote.SetLogTuning(l, 3600_000, 2, 64)
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 1000, Window: 100 * time.Millisecond}
	for i := range 2000 {
		clk.Advance(time.Millisecond)
		if _, err := l.AllowN(ctx, "k", rule, 1+int64(i%2)); err != nil {
			t.Fatal(err)
		}
		v, err := c.Do(ctx, c.B().Get().Key(l.Key("k")).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		if i > 500 && binary.LittleEndian.Uint64([]byte(v[65:])) != 0 {
			return struct {
				rule  ringlimit.Rule
				at    time.Time
				value string
			}{rule, clk.Now().Add(time.Millisecond), v}
		}
	}
	t.Fatal("no call left the log mid-move")
	panic("unreachable")
}

func bytesOf(n int, b byte) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

// Every script terminates at once on any byte string under its key:
// truncated, bit-flipped and length-inflated versions of real stored values
// of all five algorithms. Each call returns within callTimeout with a
// decision or ErrBadValue (never another error, which a failover would count
// against the store), a value answered with ErrBadValue is left untouched,
// and another client's PING is answered at once after each.
func TestCorruptValuesTerminate(t *testing.T) {
	srv, c := server(t)
	pinger := dial(t, srv.Addr()) // another client

	ctx := context.Background()
	rng := rand.New(rand.NewPCG(14, 2))
	values := realValues(t, c)
	type realValue struct {
		name  string
		rule  ringlimit.Rule
		at    time.Time
		value string
		tuned bool // the scripts move 64 bytes a call (SetLogTuning)
	}
	var reals []realValue
	for _, alg := range algorithms {
		v := values[alg]
		reals = append(reals, realValue{alg.String(), v.rule, v.at, v.value, false})
	}
	// The log as the previous release stored it (format 1), and a log in
	// the middle of a move.
	logv := values[ringlimit.SlidingLog]
	st, err := remote.DecodeState([]byte(logv.value))
	if err != nil {
		t.Fatal(err)
	}
	reals = append(reals, realValue{"sliding_log format 1", logv.rule, logv.at, string(format1(st)), false})
	// The buckets' values with an epoch (a reservation was made in them).
	for _, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket} {
		v := values[alg]
		st, err := remote.DecodeState([]byte(v.value))
		if err != nil {
			t.Fatal(err)
		}
		st.C = 1_765_000_000_000_000
		reals = append(reals, realValue{alg.String() + " with epoch", v.rule, v.at, string(remote.EncodeState(st)), false})
	}
	moving := movingLog(t, c)
	reals = append(reals, realValue{"sliding_log mid-move", moving.rule, moving.at, moving.value, true})
	for _, real := range reals {
		alg := real.name
		clk := testclock.New(real.at)
		l := remote.New(c, remote.Config{Clock: clk, Prefix: "corrupt:"})
		if real.tuned {
			remote.SetLogTuning(l, 0, 2, 64)
		}
		key := l.Key("k")
		var decided, bad int
		for name, v := range mutations(real.value, rng) {
			for _, n := range []int64{0, 1, real.rule.Limit} {
				if err := c.Do(ctx, c.B().Set().Key(key).Value(v).Build()).Error(); err != nil {
					t.Fatal(err)
				}
				cctx, cancel := context.WithTimeout(ctx, callTimeout)
				_, err := l.AllowN(cctx, "k", real.rule, n)
				if alg := real.rule.Algorithm; n == 1 && (alg == ringlimit.TokenBucket || alg == ringlimit.LeakyBucket) {
					// A reservation, and its cancel, on the same bytes.
					if err := c.Do(ctx, c.B().Set().Key(key).Value(v).Build()).Error(); err != nil {
						t.Fatal(err)
					}
					var undo func(context.Context) error
					_, _, undo, err = l.Reserve(cctx, "k", real.rule, n, time.Time{})
					if errors.Is(err, ringlimit.ErrWaitTooLong) {
						err = nil // a well-formed level past the queue's reach: decided
					}
					if undo != nil {
						if cerr := undo(cctx); cerr != nil {
							t.Fatalf("%s, %s: cancel: %v", alg, name, cerr)
						}
					} else if err == nil {
						if err := c.Do(ctx, c.B().Set().Key(key).Value(v).Build()).Error(); err != nil {
							t.Fatal(err)
						}
						_, err = l.AllowN(cctx, "k", real.rule, n) // (as it was)
					}
				}
				cancel()
				pctx, pcancel := context.WithTimeout(ctx, callTimeout)
				perr := pinger.Do(pctx, pinger.B().Ping().Build()).Error()
				pcancel()
				if perr != nil {
					t.Fatalf("%s, %s, n %d: the server does not answer PING: %v (call: %v)", alg, name, n, perr, err)
				}
				switch {
				case err == nil:
					decided++
				case errors.Is(err, remote.ErrBadValue) && errors.Is(err, ringlimit.ErrBadValue):
					bad++
					if got, _ := c.Do(ctx, c.B().Get().Key(key).Build()).ToString(); got != v {
						t.Fatalf("%s, %s, n %d: a bad value was overwritten", alg, name, n)
					}
				default:
					t.Fatalf("%s, %s, n %d: %v; want a decision or ErrBadValue", alg, name, n, err)
				}
			}
		}
		t.Logf("%s: %d calls decided, %d answered ErrBadValue", alg, decided, bad)
		if bad == 0 || decided == 0 {
			t.Errorf("%s: %d decided, %d bad: the mutations miss a path", alg, decided, bad)
		}
	}
}

// A key that holds another type, or a string we did not write, is a problem
// of that key: every call on it returns ErrBadValue, and no call and no Reset
// changes it; WriteStates (the write-behind) never writes over another type. LoadState reports it.
// Another key of the same server is decided as usual.
func TestForeignValuesAreLeftAlone(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "app:"})
	b := c.B()
	foreign := []struct {
		name     string
		write    valkey.Completed
		isString bool
	}{
		{"hash", b.Hset().Key(l.Key("hash")).FieldValue().FieldValue("f", "v").Build(), false},
		{"list", b.Rpush().Key(l.Key("list")).Element("a", "b").Build(), false},
		{"set", b.Sadd().Key(l.Key("set")).Member("a").Build(), false},
		{"zset", b.Zadd().Key(l.Key("zset")).ScoreMember().ScoreMember(1, "a").Build(), false},
		{"string", b.Set().Key(l.Key("string")).Value("another application's value").Build(), true},
		{"tagged short", b.Set().Key(l.Key("tagged short")).Value("\x00\x01\x00\x00\x00\x00\x00\x00\x00xyz").Build(), true},
	}
	snapshot := func(key string) string {
		d, err := c.Do(ctx, b.Dump().Key(l.Key(key)).Build()).ToString()
		if err != nil {
			t.Fatalf("DUMP %s: %v", key, err)
		}
		return d
	}
	for _, f := range foreign {
		if err := c.Do(ctx, f.write).Error(); err != nil {
			t.Fatal(err)
		}
		before := snapshot(f.name)
		for _, alg := range algorithms {
			rule := ringlimit.Rule{Algorithm: alg, Limit: 5, Window: time.Minute}
			if _, err := l.AllowN(ctx, f.name, rule, 1); !errors.Is(err, remote.ErrBadValue) {
				t.Errorf("%s, %s: AllowN: %v, want ErrBadValue", f.name, alg, err)
			}
			if _, err := l.Peek(ctx, f.name, rule); !errors.Is(err, remote.ErrBadValue) {
				t.Errorf("%s, %s: Peek: %v, want ErrBadValue", f.name, alg, err)
			}
			if !f.isString { // WriteStates replaces a foreign string (see remote/doc.go)
				st := remote.State{Algorithm: alg, Window: 60_000, A: 1, B: 2}
				if err := l.WriteStates(ctx, []remote.KeyState{{Key: f.name, State: st, TTL: time.Minute}}); err != nil {
					t.Errorf("%s, %s: WriteStates: %v", f.name, alg, err)
				}
			}
		}
		if err := l.Reset(ctx, f.name); err != nil {
			t.Errorf("%s: Reset: %v", f.name, err)
		}
		if _, _, _, err := l.LoadState(ctx, f.name); !errors.Is(err, remote.ErrBadValue) {
			t.Errorf("%s: LoadState: %v, want ErrBadValue", f.name, err)
		}
		if after := snapshot(f.name); after != before {
			t.Errorf("%s: the value was changed", f.name)
		}
	}
	// Our own keys: written, decided and reset as usual, also by WriteStates.
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Minute}
	if d, err := l.AllowN(ctx, "ours", rule, 2); err != nil || d.Remaining != 3 {
		t.Fatalf("our key: %+v, %v", d, err)
	}
	st := remote.State{Algorithm: ringlimit.FixedWindow, Window: 60_000, A: time.Now().UnixMilli() / 60_000, B: 4}
	if err := l.WriteStates(ctx, []remote.KeyState{{Key: "ours", State: st, TTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	if s, _, ok, err := l.LoadState(ctx, "ours"); err != nil || !ok || s.B != 4 {
		t.Fatalf("our key after WriteStates: %+v %v %v", s, ok, err)
	}
	if err := l.Reset(ctx, "ours"); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Do(ctx, b.Exists().Key(l.Key("ours")).Build()).AsInt64(); n != 0 {
		t.Fatal("Reset left our key")
	}
}

// A format 2 log's move fields are checked before anything is read or
// written by them: each header below, on a real log in the middle of a move,
// is answered with ErrBadValue by a call and a peek, and left as it is.
func TestSlidingLogBadMoves(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	real := movingLog(t, c)
	le := binary.LittleEndian
	v := []byte(real.value)
	size := le.Uint64(v[25:])
	src, moved := le.Uint64(v[57:]), le.Uint64(v[65:])
	if src == 0 || moved <= src {
		t.Fatalf("not mid-move: src %d, moved %d", src, moved)
	}
	with := func(fields ...uint64) string { // offset, value, ...
		b := []byte(real.value)
		for i := 0; i < len(fields); i += 2 {
			le.PutUint64(b[fields[i]:], fields[i+1])
		}
		return string(b)
	}
	bad := map[string]string{
		"src without moved":             with(65, 0),
		"moved without src":             with(57, 0),
		"src at the header":             with(57, 73, 65, 73+moved-src),
		"moved before src":              with(65, src-16),
		"moved past size":               with(65, size+16),
		"src misaligned":                with(57, src+1),
		"moved misaligned":              with(65, moved+1),
		"a copy past head":              with(17, 73+moved-src-16),
		"base at 2^52":                  with(49, 1<<52),
		"size past the value's length":  with(25, uint64(len(v))+16),
		"head inside the header":        with(17, 57),
		"moved far past the end (2^62)": with(65, 1<<62),
	}
	clk := testclock.New(real.at)
	l := remote.New(c, remote.Config{Clock: clk, Prefix: "badmove:"})
	remote.SetLogTuning(l, 0, 2, 64)
	for name, b := range bad {
		if err := c.Do(ctx, c.B().Set().Key(l.Key("k")).Value(b).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		for _, n := range []int64{1, 0} {
			if _, err := l.AllowN(ctx, "k", real.rule, n); !errors.Is(err, remote.ErrBadValue) {
				t.Errorf("%s, n %d: %v, want ErrBadValue", name, n, err)
			}
		}
		if got, _ := c.Do(ctx, c.B().Get().Key(l.Key("k")).Build()).ToString(); got != b {
			t.Errorf("%s: the value was changed", name)
		}
		if _, err := remote.DecodeState([]byte(b)); !errors.Is(err, remote.ErrBadState) {
			t.Errorf("%s: DecodeState: %v, want ErrBadState", name, err)
		}
	}
	// The real value itself is decided on, and decodes.
	if err := c.Do(ctx, c.B().Set().Key(l.Key("k")).Value(real.value).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AllowN(ctx, "k", real.rule, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.DecodeState(v); err != nil {
		t.Fatal(err)
	}
}

// FuzzSlidingLogValue stores any bytes under a sliding log's key and makes
// a peek, a call and a call of Limit hits on it, through the scripts as
// shipped and tuned (2 entries read in one piece, 64 bytes moved a call):
// each returns within callTimeout with a decision or ErrBadValue, a value
// answered with ErrBadValue is left as it was, and another client's PING is
// answered after each. The seeds are real values: format 2, format 2 in the
// middle of a move, and format 1.
func FuzzSlidingLogValue(f *testing.F) {
	srv, c := server(f)
	pinger := dial(f, srv.Addr())
	ctx := context.Background()
	real := realValues(f, c)[ringlimit.SlidingLog]
	f.Add(real.value, false)
	if st, err := remote.DecodeState([]byte(real.value)); err == nil {
		f.Add(string(format1(st)), false)
	}
	moving := movingLog(f, c)
	f.Add(moving.value, true)
	at := real.at
	f.Fuzz(func(t *testing.T, v string, tuned bool) {
		l := remote.New(c, remote.Config{Clock: testclock.New(at), Prefix: "fuzz:"})
		if tuned {
			remote.SetLogTuning(l, 0, 2, 64)
		}
		for _, n := range []int64{0, 1, real.rule.Limit} {
			if err := c.Do(ctx, c.B().Set().Key(l.Key("k")).Value(v).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			_, err := l.AllowN(cctx, "k", real.rule, n)
			cancel()
			pctx, pcancel := context.WithTimeout(ctx, callTimeout)
			perr := pinger.Do(pctx, pinger.B().Ping().Build()).Error()
			pcancel()
			if perr != nil {
				t.Fatalf("n %d: the server does not answer PING: %v (call: %v)", n, perr, err)
			}
			switch {
			case err == nil:
			case errors.Is(err, remote.ErrBadValue):
				if got, _ := c.Do(ctx, c.B().Get().Key(l.Key("k")).Build()).ToString(); got != v {
					t.Fatalf("n %d: a bad value was overwritten", n)
				}
			default:
				t.Fatalf("n %d: %v; want a decision or ErrBadValue", n, err)
			}
		}
	})
}
