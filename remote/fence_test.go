package remote_test

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// fixedAt is a fixed-window state of this minute with count n.
func fixedAt(n int64) remote.State {
	return remote.State{Algorithm: ringlimit.FixedWindow, Window: 60_000, A: time.Now().UnixMilli() / 60_000, B: n}
}

// WriteStates writes a key's states only if no version is stored or its
// version is above the stored one; what it drops it counts. Each row writes
// count b at version (epoch, seq) and says whether it is written.
func TestWriteStatesFenced(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "fence:"})
	steps := []struct {
		epoch, seq uint64
		b          int64
		written    bool
	}{
		{0, 0, 1, true},   // no version stored: written, and none stored
		{0, 0, 2, true},   // still none stored: written
		{5, 1, 3, true},   // a version above none
		{5, 1, 4, false},  // equal: dropped
		{5, 0, 5, false},  // an older seq
		{4, 9, 6, false},  // an older epoch, whatever its seq
		{0, 0, 7, false},  // no version, where one is stored
		{5, 2, 8, true},   // the next write of the holder
		{6, 0, 9, true},   // a new holder's first
		{5, 3, 10, false}, // the old holder's late write-behind
	}
	want, stale := int64(0), uint64(0)
	for i, s := range steps {
		ver := remote.Version{Epoch: s.epoch, Seq: s.seq, Origins: [3]uint64{uint64(i + 1), 1 << 63, 0}}
		if err := l.WriteStates(ctx, []remote.KeyState{{Key: "k", State: fixedAt(s.b), TTL: time.Minute, Ver: ver}}); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if s.written {
			want = s.b
		} else {
			stale++
		}
		got, _, ok, err := l.LoadState(ctx, "k")
		if err != nil || !ok || got.B != want {
			t.Fatalf("step %d (%d.%d): stored count %d (%v, %v), want %d", i, s.epoch, s.seq, got.B, ok, err, want)
		}
		if n := l.StaleWrites(); n != stale {
			t.Fatalf("step %d: StaleWrites %d, want %d", i, n, stale)
		}
	}
	// The stored version is the last written, origins and all.
	ld, err := l.ClaimState(ctx, "k", remote.Claim{Member: "n1", TTL: time.Minute})
	if wantVer := (remote.Version{Epoch: 6, Origins: [3]uint64{9, 1 << 63, 0}}); err != nil || ld.Ver != wantVer {
		t.Fatalf("stored version %+v (%v), want %+v", ld.Ver, err, wantVer)
	}
}

// One WriteStates call mixes keys: each is fenced by its own version, and
// a key's states at several indexes go (or are dropped) together. The
// version lives as long as the longest of them.
func TestWriteStatesFencedPerKey(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "fence:"})
	day := fixedAt(1)
	day.Index, day.Window, day.A, day.Until = 1, 86_400_000, time.Now().UnixMilli()/86_400_000, 3_600_000
	both := fixedAt(1)
	both.More = []remote.State{day}
	v := func(e uint64) remote.Version { return remote.Version{Epoch: e} }
	if err := l.WriteStates(ctx, []remote.KeyState{
		{Key: "a", State: both, TTL: time.Minute, Ver: v(10)},
		{Key: "b", State: fixedAt(1), TTL: time.Minute, Ver: v(10)},
	}); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := c.Do(ctx, c.B().Pttl().Key(l.VersionKey("a")).Build()).AsInt64(); ttl < 3_599_000 || ttl > 3_660_000 {
		t.Fatalf("version TTL %d ms, want the day index's (an hour past index 0's minute)", ttl)
	}
	both.B, both.More[0].B = 2, 2
	if err := l.WriteStates(ctx, []remote.KeyState{
		{Key: "a", State: both, TTL: time.Second, Ver: v(9)}, // stale: neither index written
		{Key: "b", State: fixedAt(2), TTL: time.Second, Ver: v(11)},
	}); err != nil {
		t.Fatal(err)
	}
	a, _, _, _ := l.LoadState(ctx, "a")
	b, _, _, _ := l.LoadState(ctx, "b")
	if a.B != 1 || len(a.More) != 1 || a.More[0].B != 1 || b.B != 2 || l.StaleWrites() != 1 {
		t.Fatalf("a %+v, b %+v, stale %d; want a untouched at both indexes, b written, one stale", a, b, l.StaleWrites())
	}
	// A shorter write does not shorten the version's life.
	if err := l.WriteStates(ctx, []remote.KeyState{{Key: "a", State: fixedAt(3), TTL: time.Second, Ver: v(12)}}); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := c.Do(ctx, c.B().Pttl().Key(l.VersionKey("a")).Build()).AsInt64(); ttl < 59*60_000 {
		t.Fatalf("version TTL %d ms after a 1 s write, want the hour kept", ttl)
	}
}

// The decision scripts (the store deciding on fallback), AllowAll's
// included, and Reset leave the version as it is: a late write is still
// dropped after them, and a load still reads the version. A value stored
// without a version (an old release's, or a decision's) reads as none.
func TestDecisionsKeepTheVersion(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "fence:"})
	rules := []ringlimit.Rule{
		{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute},
		{Algorithm: ringlimit.SlidingLog, Limit: 100, Window: time.Hour},
	}
	for _, alg := range algorithms {
		key := "k-" + alg.String()
		rule := ringlimit.Rule{Algorithm: alg, Limit: 10, Window: time.Minute}
		if _, err := l.AllowN(ctx, key, rule, 1); err != nil { // a value with no version
			t.Fatal(err)
		}
		if ld, err := l.ClaimState(ctx, key, remote.Claim{Member: "n1", TTL: time.Minute}); err != nil || !ld.Found || ld.Ver != (remote.Version{}) {
			t.Fatalf("%s: a decision's value: %+v, %v; want found, no version", alg, ld, err)
		}
		ver := remote.Version{Epoch: 1_700_000_000_000, Seq: 7, Origins: [3]uint64{3, 2, 1}}
		st, _, _, _ := l.LoadState(ctx, key)
		if err := l.WriteStates(ctx, []remote.KeyState{{Key: key, State: st, TTL: time.Minute, Ver: ver}}); err != nil {
			t.Fatal(err)
		}
		raw := func() string {
			v, _ := c.Do(ctx, c.B().Get().Key(l.VersionKey(key)).Build()).ToString()
			return v
		}
		before := raw()
		for range 3 {
			if _, err := l.AllowN(ctx, key, rule, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := l.AllowAll(ctx, key, rules, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Peek(ctx, key, rule); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Reset(ctx, key); err != nil {
			t.Fatal(err)
		}
		if after := raw(); after != before || len(after) != 40 {
			t.Fatalf("%s: the version's value went from %x to %x", alg, before, after)
		}
		stale := l.StaleWrites()
		if err := l.WriteStates(ctx, []remote.KeyState{{Key: key, State: st, TTL: time.Minute, Ver: remote.Version{Epoch: ver.Epoch, Seq: 6}}}); err != nil {
			t.Fatal(err)
		}
		if l.StaleWrites() != stale+1 {
			t.Fatalf("%s: a late write after the decisions was not dropped", alg)
		}
		if ld, err := l.ClaimState(ctx, key, remote.Claim{Member: "n1", TTL: time.Minute}); err != nil || ld.Ver != ver {
			t.Fatalf("%s: version after the decisions %+v (%v), want %+v", alg, ld.Ver, err, ver)
		}
	}
}

// A version key that holds something not ours (another type, a string of
// the wrong length, an epoch past 2^53) is never written over: WriteStates
// skips the key without an error and counts nothing; ClaimState refuses it
// and claims nothing. A version out of range is refused before anything is
// sent.
func TestBadVersions(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "fence:"})
	b := c.B()
	huge := remote.EncodeVersion(remote.Version{Seq: 1})
	huge[6] = 0x20 // epoch 2^53
	for name, put := range map[string]valkey.Completed{
		"hash":  b.Hset().Key(l.VersionKey("hash")).FieldValue().FieldValue("f", "v").Build(),
		"short": b.Set().Key(l.VersionKey("short")).Value("not a version").Build(),
		"huge":  b.Set().Key(l.VersionKey("huge")).Value(valkey.BinaryString(huge)).Build(),
	} {
		if err := c.Do(ctx, put).Error(); err != nil {
			t.Fatal(err)
		}
		if err := l.WriteStates(ctx, []remote.KeyState{{Key: name, State: fixedAt(1), TTL: time.Minute, Ver: remote.Version{Epoch: 1 << 52}}}); err != nil {
			t.Fatalf("%s: WriteStates: %v", name, err)
		}
		if _, _, ok, _ := l.LoadState(ctx, name); ok || l.StaleWrites() != 0 {
			t.Fatalf("%s: written (%v) or counted stale (%d)", name, ok, l.StaleWrites())
		}
		if _, err := l.ClaimState(ctx, name, remote.Claim{Member: "n1", TTL: time.Minute}); !errors.Is(err, remote.ErrBadValue) {
			t.Fatalf("%s: ClaimState: %v, want ErrBadValue", name, err)
		}
		if n, _ := c.Do(ctx, b.Exists().Key(l.ClaimKey(name)).Build()).AsInt64(); n != 0 {
			t.Fatalf("%s: claimed", name)
		}
	}
	for _, v := range []remote.Version{{Epoch: 1 << 53}, {Seq: 1 << 63}} {
		err := l.WriteStates(ctx, []remote.KeyState{{Key: "x", State: fixedAt(1), TTL: time.Minute, Ver: v}})
		if !errors.Is(err, remote.ErrBadState) {
			t.Fatalf("version %+v: %v, want ErrBadState", v, err)
		}
	}
	if n, _ := c.Do(ctx, b.Exists().Key(l.Key("x"), l.VersionKey("x")).Build()).AsInt64(); n != 0 {
		t.Fatal("a refused write wrote")
	}
}

// After the server lost its script cache the write goes through EVAL,
// once per key, and is fenced as before.
func TestWriteStatesNoScript(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "fence:"})
	for i, e := range []uint64{2, 1, 3} {
		if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		ks := []remote.KeyState{{Key: "k", State: fixedAt(int64(e)), TTL: time.Minute, Ver: remote.Version{Epoch: e}}}
		if err := l.WriteStates(ctx, ks); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if s, _, _, _ := l.LoadState(ctx, "k"); s.B != 3 || l.StaleWrites() != 1 {
		t.Fatalf("count %d, stale %d; want 3 and 1", s.B, l.StaleWrites())
	}
	if st := commandStats(t, c); st["eval"].calls != 3 {
		t.Fatalf("%d EVALs, want one per write", st["eval"].calls)
	}
}

// ClaimState loads a key's states and claims it, in one script: another
// member's claim stands unless that member was cleared, a member's own
// claim is taken again, and a standing claim loads nothing.
func TestClaimState(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "claim:"})
	day := fixedAt(5)
	day.Index, day.Window, day.A, day.Until = 2, 86_400_000, time.Now().UnixMilli()/86_400_000, 3_600_000
	st := fixedAt(4)
	st.More = []remote.State{day}
	ver := remote.Version{Epoch: 99, Seq: 3, Origins: [3]uint64{1, 2, 3}}
	if err := l.WriteStates(ctx, []remote.KeyState{{Key: "k", State: st, TTL: time.Minute, Ver: ver}}); err != nil {
		t.Fatal(err)
	}
	claim := func(member string, inc uint64, cleared ...string) remote.Loaded {
		t.Helper()
		ld, err := l.ClaimState(ctx, "k", remote.Claim{Member: member, Inc: inc, Cleared: cleared, TTL: time.Hour})
		if err != nil {
			t.Fatalf("%s claims: %v", member, err)
		}
		return ld
	}
	loaded := func(ld remote.Loaded) bool {
		return ld.Holder == "" && ld.Found && ld.Ver == ver && ld.State.B == 4 && ld.TTL > 59*time.Second &&
			len(ld.State.More) == 1 && ld.State.More[0].B == 5 && ld.State.More[0].Index == 2
	}
	steps := []struct {
		member  string
		inc     uint64
		cleared []string
		holder  string // "" : the claim is the member's, and it loaded
		hinc    uint64
	}{
		{"n1", 1, nil, "", 0},                    // the first claim stands
		{"n2", 7, nil, "n1", 1},                  // the second member finds it
		{"n2", 7, []string{"n3", "n4"}, "n1", 1}, // others cleared: it still stands
		{"n1", 2, nil, "", 0},                    // its own, of a later incarnation: taken again
		{"n2", 7, []string{"n1"}, "", 0},         // n1 cleared by n2's pull: overridden
		{"n1", 2, nil, "n2", 7},                  // now n2's
		{"n2", 8, nil, "", 0},                    // n2's own again
	}
	for i, s := range steps {
		ld := claim(s.member, s.inc, s.cleared...)
		if s.holder == "" && !loaded(ld) || s.holder != "" && !reflect.DeepEqual(ld, remote.Loaded{Holder: s.holder, HolderInc: s.hinc}) {
			t.Fatalf("step %d: %s (inc %d, cleared %v) gets %+v; want holder %q (inc %d)", i, s.member, s.inc, s.cleared, ld, s.holder, s.hinc)
		}
	}
	// A key with nothing stored is claimed all the same.
	ld, err := l.ClaimState(ctx, "empty", remote.Claim{Member: "n1", TTL: time.Minute})
	if err != nil || ld.Found || ld.Holder != "" || ld.Ver != (remote.Version{}) {
		t.Fatalf("an empty key: %+v, %v", ld, err)
	}
	if ld, _ := l.ClaimState(ctx, "empty", remote.Claim{Member: "n2", TTL: time.Minute}); ld.Holder != "n1" {
		t.Fatalf("an empty key's claim: %+v, want n1's", ld)
	}
}

// A claim stands for its TTL, then goes.
func TestClaimExpires(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "claim:"})
	if ld, err := l.ClaimState(ctx, "k", remote.Claim{Member: "n1", TTL: 1500 * time.Millisecond}); err != nil || ld.Holder != "" {
		t.Fatal(ld, err)
	}
	// 1.5 s: the next call, one round trip later, finds it even on a
	// loaded machine.
	if ld, err := l.ClaimState(ctx, "k", remote.Claim{Member: "n2", TTL: time.Minute}); err != nil || ld.Holder != "n1" {
		t.Fatalf("within the TTL: %+v, %v", ld, err)
	}
	if ttl, _ := c.Do(ctx, c.B().Pttl().Key(l.ClaimKey("k")).Build()).AsInt64(); ttl <= 0 || ttl > 1500 {
		t.Fatalf("claim TTL %d ms, want at most 1500", ttl)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ld, err := l.ClaimState(ctx, "k", remote.Claim{Member: "n2", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if ld.Holder == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("n1's claim of 1.5 s still stands after 10 s")
		}
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
}

// Bad input is refused with its sentinel before anything is sent; a claim
// or a state that is not ours is refused with ErrBadValue, and nothing is
// claimed.
func TestClaimStateBadInput(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "claim:"})
	ok := remote.Claim{Member: "n1", TTL: time.Minute}
	for _, tc := range []struct {
		key  string
		c    remote.Claim
		want error
	}{
		{"", ok, ringlimit.ErrInvalidKey},
		{"k", remote.Claim{TTL: time.Minute}, remote.ErrBadClaim},
		{"k", remote.Claim{Member: strings.Repeat("m", remote.MaxMemberLen+1), TTL: time.Minute}, remote.ErrBadClaim},
		{"k", remote.Claim{Member: "n1"}, remote.ErrBadClaim},
		{"k", remote.Claim{Member: "n1", TTL: -time.Second}, remote.ErrBadClaim},
	} {
		if _, err := l.ClaimState(ctx, tc.key, tc.c); !errors.Is(err, tc.want) {
			t.Errorf("ClaimState(%q, %+v): %v, want %v", tc.key, tc.c, err, tc.want)
		}
	}
	if n := scriptCalls(t, c); n != 0 {
		t.Fatalf("%d scripts ran for bad input", n)
	}
	long := strings.Repeat("m", remote.MaxMemberLen)
	if ld, err := l.ClaimState(ctx, "long", remote.Claim{Member: long, Inc: 1 << 63, TTL: time.Minute}); err != nil || ld.Holder != "" {
		t.Fatal(ld, err)
	}
	if ld, err := l.ClaimState(ctx, "long", ok); err != nil || ld.Holder != long || ld.HolderInc != 1<<63 {
		t.Fatalf("the longest member's claim: %+v, %v", ld, err)
	}
	b := c.B()
	for _, put := range []valkey.Completed{
		b.Hset().Key(l.ClaimKey("a")).FieldValue().FieldValue("f", "v").Build(),                  // a hash claim
		b.Set().Key(l.ClaimKey("b")).Value("12345678").Build(),                                   // no member
		b.Set().Key(l.ClaimKey("c")).Value(strings.Repeat("x", 8+remote.MaxMemberLen+1)).Build(), // too long
		b.Set().Key(l.IndexKey("d", 1)).Value("hello").Build(),                                   // a foreign state
		b.Lpush().Key(l.Key("e")).Element("x").Build(),                                           // a list state
	} {
		if err := c.Do(ctx, put).Error(); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		before, _ := c.Do(ctx, b.Dump().Key(l.ClaimKey(key)).Build()).ToString()
		if _, err := l.ClaimState(ctx, key, ok); !errors.Is(err, remote.ErrBadValue) {
			t.Errorf("%s: ClaimState: %v, want ErrBadValue", key, err)
		}
		if after, _ := c.Do(ctx, b.Dump().Key(l.ClaimKey(key)).Build()).ToString(); after != before {
			t.Errorf("%s: the claim key changed", key)
		}
	}
}

// A Connector that is not connected says so, after refusing bad input as
// the Limiter does.
func TestConnectorClaimNotConnected(t *testing.T) {
	dead := valkeytest.Start(t)
	dead.Kill()
	k := remote.Connect(remote.Options{Addrs: []string{dead.Addr()}}, remote.Config{}, remote.ConnectConfig{})
	defer k.Close()
	ctx := context.Background()
	if _, err := k.ClaimState(ctx, "k", remote.Claim{Member: "n1", TTL: time.Second}); !errors.Is(err, remote.ErrNotConnected) {
		t.Fatalf("ClaimState before connecting: %v", err)
	}
	if _, err := k.ClaimState(ctx, "k", remote.Claim{TTL: time.Second}); !errors.Is(err, remote.ErrBadClaim) {
		t.Fatalf("a bad claim before connecting: %v", err)
	}
	if k.StaleWrites() != 0 {
		t.Fatal("StaleWrites before connecting")
	}
}

// One call of more keys than one script run takes (64) writes them in
// several runs, each key fenced by its own version, in the call's order: a
// key written twice in one call keeps the higher version's state.
func TestWriteStatesManyKeys(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "fence:"})
	const n = 200
	var ks []remote.KeyState
	for i := range n {
		ks = append(ks, remote.KeyState{Key: "k" + strconv.Itoa(i), State: fixedAt(1), TTL: time.Minute, Ver: remote.Version{Epoch: 10}})
	}
	if err := l.WriteStates(ctx, ks); err != nil {
		t.Fatal(err)
	}
	// Even keys: a late write (epoch 9); odd: a newer one (11); then key 0
	// and key 1 again, at 12 and 10.
	for i := range ks {
		ks[i].State, ks[i].Ver.Epoch = fixedAt(2), uint64(9+2*(i%2))
	}
	ks = append(ks, remote.KeyState{Key: "k0", State: fixedAt(3), TTL: time.Minute, Ver: remote.Version{Epoch: 12}},
		remote.KeyState{Key: "k1", State: fixedAt(4), TTL: time.Minute, Ver: remote.Version{Epoch: 10}})
	before := scriptCalls(t, c)
	if err := l.WriteStates(ctx, ks); err != nil {
		t.Fatal(err)
	}
	if runs := scriptCalls(t, c) - before; runs != (n+2+63)/64 {
		t.Fatalf("%d keys written in %d script runs, want %d", n+2, runs, (n+2+63)/64)
	}
	if got, want := l.StaleWrites(), uint64(n/2+1); got != want {
		t.Fatalf("StaleWrites %d, want %d", got, want)
	}
	for i := range n {
		want := int64(1 + i%2)
		if i == 0 {
			want = 3
		}
		if s, _, _, err := l.LoadState(ctx, "k"+strconv.Itoa(i)); err != nil || s.B != want {
			t.Fatalf("k%d: count %d (%v), want %d", i, s.B, err, want)
		}
	}
}
