package memstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
)

// TestAllowNIfAt checks that a key without a state is started only if
// the gate opens, asked with the caller's token (and nothing is recorded
// if not), that a key holding a state is decided whatever the gate says, on the state AllowN uses (the hash
// given is the key's place), and that bad input is refused either way.
func TestAllowNIfAt(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 3, Window: time.Minute}
	now := time.Unix(1_700_000_000, 0)
	for _, hash := range []func(string) uint64{nil, xxhash.Sum64String} {
		l := memstore.New(memstore.Config{Hash: hash})
		asked := 0
		gate := func(open bool) memstore.Gate {
			return memstore.Gate{Tok: 42, Fresh: func(tok uint64) bool {
				asked++
				if tok != 42 {
					t.Errorf("the gate was asked with token %d, want the caller's 42", tok)
				}
				return open
			}}
		}
		yes, no := gate(true), gate(false)
		if ok, err := l.AllowNIfAt(new(ringlimit.Decision), now, "k", 0, rule, 1, memstore.Gate{}); ok || err != nil {
			t.Fatalf("no state, the zero gate: decided %v, err %v", ok, err)
		}
		h := xxhash.Sum64String("k")
		if ok, err := l.AllowNIfAt(new(ringlimit.Decision), now, "k", h, rule, 1, no); ok || err != nil || asked != 1 {
			t.Fatalf("no state, fresh false: decided %v, err %v, asked %d", ok, err, asked)
		}
		if d, _ := l.AllowNAt(now, "k", rule, 0); d.Remaining != 3 || l.Stats().Keys != 0 {
			t.Fatalf("recorded with fresh false: remaining %d, %d keys", d.Remaining, l.Stats().Keys)
		}
		if d, ok, err := allowNIfAt(l, now, "k", h, rule, 1, yes); !ok || err != nil || !d.Allowed || d.Remaining != 2 || asked != 2 {
			t.Fatalf("no state, fresh true: %+v decided %v err %v asked %d", d, ok, err, asked)
		}
		if d, ok, err := allowNIfAt(l, now, "k", h, rule, 1, no); !ok || err != nil || !d.Allowed || d.Remaining != 1 || asked != 2 {
			t.Fatalf("held, fresh not asked: %+v decided %v err %v asked %d", d, ok, err, asked)
		}
		if d, _ := l.AllowNAt(now, "k", rule, 1); !d.Allowed || d.Remaining != 0 {
			t.Fatalf("AllowNAt after two gated hits: %+v (not the same state)", d)
		}
		if ok, err := l.AllowNIfAt(new(ringlimit.Decision), now.Add(time.Minute), "k", h, rule, 1, no); ok || err != nil {
			t.Fatalf("a state past its window is no state: decided %v, err %v", ok, err)
		}
		if st := l.Stats(); st.Keys != 1 {
			t.Fatalf("%d keys, want 1", st.Keys)
		}
		if ok, err := l.AllowNIfAt(new(ringlimit.Decision), now, "x", 0, ringlimit.Rule{Limit: -1, Window: time.Second}, 1, yes); ok || !errors.Is(err, ringlimit.ErrInvalidRule) {
			t.Fatalf("bad rule: decided %v, err %v", ok, err)
		}
		if ok, err := l.AllowNIfAt(new(ringlimit.Decision), now, "", 0, rule, 1, yes); ok || !errors.Is(err, ringlimit.ErrInvalidKey) {
			t.Fatalf("empty key: decided %v, err %v", ok, err)
		}
		if l.Stats().Keys != 1 {
			t.Fatal("bad input recorded a key")
		}
	}
}

func allowNIfAt(l *memstore.Limiter, now time.Time, key string, h uint64, rule ringlimit.Rule, n int64, gate memstore.Gate) (ringlimit.Decision, bool, error) {
	var d ringlimit.Decision
	ok, err := l.AllowNIfAt(&d, now, key, h, rule, n, gate)
	return d, ok, err
}
