package failover_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
)

// shardedFake is a primary of two shards, "a" (keys starting with a) and
// "b"; shard a fails while down is set.
type shardedFake struct {
	down  bool
	calls map[string]int
}

func shardOf(key string) string { return key[:1] }

func (f *shardedFake) AllowN(_ context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	f.calls[shardOf(key)]++
	if f.down && shardOf(key) == "a" {
		return ringlimit.Decision{}, errStoreDown
	}
	return ringlimit.Decision{Allowed: true, Limit: rule.Limit, Remaining: rule.Capacity() - n, Source: ringlimit.Store}, nil
}

func (f *shardedFake) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return f.AllowN(ctx, key, rule, 0)
}

func (f *shardedFake) Reset(context.Context, string) error { return nil }

// One failed shard opens only its own breaker: the other shard's keys are
// still decided by the primary. Without Config.Shard the same failures send
// every key to the policy.
func TestShardBreakers(t *testing.T) {
	for _, sharded := range []bool{true, false} {
		t.Run("sharded="+strconv.FormatBool(sharded), func(t *testing.T) {
			f := &shardedFake{down: true, calls: map[string]int{}}
			c := failover.Config{MaxFailures: 3}
			if sharded {
				c.Shard = shardOf
			}
			l := failover.New(f, c)
			var fromStore, fallback int
			for i := range 20 {
				key := "a" + strconv.Itoa(i) // shard a's keys first, then b's
				if i >= 10 {
					key = "b" + strconv.Itoa(i)
				}
				d, err := l.AllowN(ctx, key, perMin30, 1)
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				if key[0] == 'b' {
					if d.Source == ringlimit.Store {
						fromStore++
					} else {
						fallback++
					}
				}
			}
			st := l.Stats()
			if !sharded {
				if fromStore != 0 || st.Shards != nil || st.State != failover.StateOpen {
					t.Fatalf("one breaker: %d of 10 b keys from the store, stats %+v", fromStore, st)
				}
				return
			}
			if fromStore != 10 || f.calls["a"] != 3 {
				t.Fatalf("b keys from the store %d of 10 (fallback %d); a calls %d, want 3", fromStore, fallback, f.calls["a"])
			}
			if st.State != failover.StateOpen || st.Opens != 1 || st.Rejected != 7 || len(st.Shards) != 3 {
				t.Fatalf("aggregate %+v", st)
			}
			want := []struct {
				name  string
				state failover.State
			}{{"", failover.StateClosed}, {"a", failover.StateOpen}, {"b", failover.StateClosed}}
			for i, w := range want {
				if s := st.Shards[i]; s.Shard != w.name || s.State != w.state {
					t.Fatalf("shard %d: %+v, want %s %s", i, s, w.name, w.state)
				}
			}
			if l.State() != failover.StateOpen {
				t.Fatalf("State() = %s, want the worst shard's", l.State())
			}
		})
	}
}

// Beyond MaxShards, new shards share the unknown shard's breaker.
func TestShardBreakersBounded(t *testing.T) {
	f := &shardedFake{calls: map[string]int{}}
	l := failover.New(f, failover.Config{Shard: func(key string) string { return strings.TrimPrefix(key, "k") }})
	for i := range failover.MaxShards + 10 {
		if _, err := l.AllowN(ctx, "k"+strconv.Itoa(i), perMin30, 1); err != nil {
			t.Fatal(err)
		}
	}
	st := l.Stats()
	if len(st.Shards) != failover.MaxShards+1 {
		t.Fatalf("%d shard breakers, want %d and the unknown shard's", len(st.Shards)-1, failover.MaxShards)
	}
	if st.Shards[0].Shard != "" {
		t.Fatalf("first shard %q, want the unknown shard", st.Shards[0].Shard)
	}
}
