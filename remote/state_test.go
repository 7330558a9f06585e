package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/remote"
)

// The stored value is what EncodeState describes, and a value written from
// Go with EncodeState is honoured by the scripts (the write-behind path).
func TestStateEncoding(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	clk := testclock.New(at)
	l := remote.New(c, remote.Config{Clock: clk})
	ms := at.UnixMilli()
	get := func(key string) []byte {
		b, err := c.Do(ctx, c.B().Get().Key(l.Key(key)).Build()).AsBytes()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		rule  ringlimit.Rule
		calls []int64 // hits per call, each at +1 ms
		want  remote.State
	}{
		{ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second}, []int64{3},
			remote.State{Algorithm: ringlimit.TokenBucket, Window: 1000, A: 3000, B: ms}},
		{ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 10, Window: time.Second}, []int64{2, 1},
			remote.State{Algorithm: ringlimit.LeakyBucket, Window: 1000, A: 3000 - 10, B: ms + 1}},
		{ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute}, []int64{4, 1},
			remote.State{Algorithm: ringlimit.FixedWindow, Window: 60000, A: ms / 60000, B: 5}},
		{ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 10, Window: time.Minute}, []int64{4, 1},
			remote.State{Algorithm: ringlimit.SlidingWindow, Window: 60000, A: ms / 60000, B: 5}},
		{ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 10, Window: time.Minute}, []int64{4, 1, 2},
			remote.State{Algorithm: ringlimit.SlidingLog, Window: 60000, Log: []remote.LogEntry{{Stamp: ms, Count: 4}, {Stamp: ms + 1, Count: 1}, {Stamp: ms + 2, Count: 2}}}},
	}
	for _, tc := range cases {
		key := "enc-" + tc.rule.Algorithm.String()
		clk.Set(at)
		for _, n := range tc.calls {
			if d, err := l.AllowN(ctx, key, tc.rule, n); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v %v", tc.rule.Algorithm, d, err)
			}
			clk.Advance(time.Millisecond)
		}
		raw := get(key)
		st, err := remote.DecodeState(raw)
		if err != nil {
			t.Fatalf("%s: %v", tc.rule.Algorithm, err)
		}
		if fmt.Sprint(st) != fmt.Sprint(tc.want) {
			t.Errorf("%s: stored %+v, want %+v", tc.rule.Algorithm, st, tc.want)
		}
		if enc := remote.EncodeState(tc.want); !bytes.Equal(enc, raw) {
			t.Errorf("%s: EncodeState %x, stored %x", tc.rule.Algorithm, enc, raw)
		}
	}
	// A full fixed window written from Go denies the next hit.
	full := remote.EncodeState(remote.State{Algorithm: ringlimit.FixedWindow, Window: 60000, A: ms / 60000, B: 10})
	if err := c.Do(ctx, c.B().Set().Key(l.Key("wb")).Value(string(full)).Px(time.Minute).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	clk.Set(at)
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute}
	if d, err := l.AllowN(ctx, "wb", rule, 1); err != nil || d.Allowed || d.Remaining != 0 {
		t.Errorf("after writing a full window: %+v %v, want denied", d, err)
	}
	// The same state under another window starts afresh, as in local.
	rule.Window = time.Hour
	if d, err := l.AllowN(ctx, "wb", rule, 1); err != nil || !d.Allowed || d.Remaining != 9 {
		t.Errorf("another window: %+v %v, want a fresh key", d, err)
	}
	for _, bad := range [][]byte{nil, {0, 1}, append([]byte(full), 0), {9, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := remote.DecodeState(bad); !errors.Is(err, remote.ErrBadState) {
			t.Errorf("DecodeState(%x): %v", bad, err)
		}
	}
}
