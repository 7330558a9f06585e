package remote_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
)

// dialCluster connects to the cluster through one seed, as a node does: no
// ForceSingleClient, so valkey-go finds the other masters itself.
func dialCluster(t testing.TB, cl *valkeytest.Cluster) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: cl.Addrs()[:1], DisableCache: true})
	if err != nil {
		t.Fatalf("dial cluster: %v", err)
	}
	t.Cleanup(c.Close)
	if c.Mode() != valkey.ClientModeCluster {
		t.Fatalf("client mode %s through one seed, want cluster", c.Mode())
	}
	return c
}

// keysOnEveryMaster returns per keys of each master's slots.
func keysOnEveryMaster(t testing.TB, l *remote.Limiter, cl *valkeytest.Cluster, prefix string, per int) [][]string {
	t.Helper()
	out := make([][]string, len(cl.Masters))
	for i, full := 0, 0; full < len(out); i++ {
		k := prefix + strconv.Itoa(i)
		m := cl.Master(int(l.Slot(k)))
		if len(out[m]) < per {
			if out[m] = append(out[m], k); len(out[m]) == per {
				full++
			}
		}
	}
	return out
}

// The cluster suite: one 3-master cluster, reached through one seed.
func TestCluster(t *testing.T) {
	cl := valkeytest.StartCluster(t, 3)
	c := dialCluster(t, cl)
	ctx := context.Background()

	t.Run("Slots", func(t *testing.T) {
		l := remote.New(c, remote.Config{})
		if got := l.Slot("123456789"); got != 0x31C3 { // the CRC16 check value of the cluster spec
			t.Fatalf("Slot(123456789) = %d, want %d", got, 0x31C3)
		}
		if l.Shard("a") != "" {
			t.Fatalf("Shard before RefreshShards = %q, want \"\"", l.Shard("a"))
		}
		if err := l.RefreshShards(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 2000 {
			// Keys with braces of their own too: "}x" hashes the whole
			// Valkey key, "x}y" only "x".
			k := [...]string{"k", "}k", "k}", "{k", "k}}"}[i%5] + strconv.Itoa(i)
			cmd := c.B().Get().Key(l.Key(k)).Build()
			want := cmd.Slot() // valkey-go's own routing
			if got := l.Slot(k); got != want {
				t.Fatalf("Slot(%q) = %d, valkey-go routes %s to %d", k, got, l.Key(k), want)
			}
			if got, want := l.Shard(k), cl.Masters[cl.Master(int(want))].Addr(); got != want {
				t.Fatalf("Shard(%q) = %q, want %q", k, got, want)
			}
		}
		if n := testing.AllocsPerRun(100, func() { _ = l.Shard("user:42") }); n != 0 {
			t.Fatalf("Shard allocates %v times", n)
		}
	})

	t.Run("Connector", func(t *testing.T) {
		// One seed, as a node's ValkeyAddrs: the
		// Connector sees cluster mode, connects as a cluster client and
		// keeps its slot map for Shard.
		k := remote.Connect(remote.Options{Addrs: cl.Addrs()[:1]},
			remote.Config{}, remote.ConnectConfig{ShardRefresh: 50 * time.Millisecond})
		defer k.Close()
		l := remote.New(c, remote.Config{})
		deadline := time.Now().Add(10 * time.Second)
		for _, key := range []string{"a", "b", "c"} {
			want := cl.Masters[cl.Master(int(l.Slot(key)))].Addr()
			for k.Shard(key) != want {
				if time.Now().After(deadline) {
					t.Fatalf("Connector.Shard(%s) = %q, want %q", key, k.Shard(key), want)
				}
				time.Sleep(5 * time.Millisecond) // poll the background refresh
			}
		}
	})

	t.Run("Differential", func(t *testing.T) {
		// runDiff's keys a, b and c live on three different masters.
		l := remote.New(c, remote.Config{Prefix: "diff:"})
		seen := map[int]bool{}
		for _, k := range []string{"a", "b", "c"} {
			seen[cl.Master(int(l.Slot(k)))] = true
		}
		if len(seen) != 3 {
			t.Fatalf("keys a, b, c on %d masters, want 3", len(seen))
		}
		for _, alg := range algorithms {
			for i, rules := range ruleSets(alg)[:4] {
				runDiff(t, c, alg, rules, uint64(i), 100)
			}
		}
	})

	t.Run("NoScript", func(t *testing.T) {
		clk := testclock.New(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
		rem := remote.New(c, remote.Config{Clock: clk, Prefix: "noscript:"})
		loc := local.New(local.Config{Clock: clk})
		keys := keysOnEveryMaster(t, rem, cl, "k", 1)
		for _, alg := range algorithms {
			rule := ringlimit.Rule{Algorithm: alg, Limit: 5, Window: time.Second}
			for i := range 4 {
				cl.FlushScripts() // every master has lost every script
				for _, ks := range keys {
					k := ks[0] + alg.String()
					dl, el := loc.AllowN(ctx, k, rule, 2)
					dr, er := rem.AllowN(ctx, k, rule, 2)
					if i%2 == 1 {
						dl, el = loc.Peek(ctx, k, rule)
						dr, er = rem.Peek(ctx, k, rule)
					}
					dr.Source = dl.Source
					if el != nil || er != nil || dl != dr {
						t.Fatalf("%s %s after SCRIPT FLUSH on every master: local %+v %v, remote %+v %v", alg, k, dl, el, dr, er)
					}
				}
				clk.Advance(150 * time.Millisecond)
			}
		}
	})

	t.Run("Load", func(t *testing.T) {
		// Callers on every master at once: each key admits exactly its limit.
		rem := remote.New(c, remote.Config{Prefix: "load:"})
		var keys []string
		for _, ks := range keysOnEveryMaster(t, rem, cl, "k", 10) {
			keys = append(keys, ks...)
		}
		rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 5, Window: time.Hour}
		admitted := make([]int64, len(keys))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range 3 * len(keys) {
					i := (g*7 + r) % len(keys)
					d, err := rem.AllowN(ctx, keys[i], rule, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						admitted[i]++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		for i, a := range admitted {
			if a != 5 {
				t.Fatalf("key %s admitted %d, want 5", keys[i], a)
			}
		}
	})

	t.Run("WriteStates", func(t *testing.T) {
		// One pipelined write of keys on every master; each reads back.
		now := time.Now()
		rem := remote.New(c, remote.Config{Prefix: "wb:"})
		var ks []remote.KeyState
		for _, keys := range keysOnEveryMaster(t, rem, cl, "k", 5) {
			for _, k := range keys {
				st := remote.State{Algorithm: ringlimit.FixedWindow, Window: 60000, A: now.UnixMilli() / 60000, B: 7}
				ks = append(ks, remote.KeyState{Key: k, State: st, TTL: time.Minute})
			}
		}
		if err := rem.WriteStates(ctx, ks); err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			got, _, ok, err := rem.LoadState(ctx, k.Key)
			if err != nil || !ok || got.B != 7 {
				t.Fatalf("LoadState(%s) = %+v %v %v", k.Key, got, ok, err)
			}
		}
	})

	t.Run("FencedWrites", func(t *testing.T) {
		// A key's version and claim share its slot, so the write's and the
		// claim's scripts run on its master (a key in another slot would
		// fail with CROSSSLOT), also after every master lost its scripts.
		rem := remote.New(c, remote.Config{Prefix: "fence:"})
		for _, keys := range keysOnEveryMaster(t, rem, cl, "k", 3) {
			for _, k := range keys {
				slot := rem.Slot(k)
				for _, sib := range []string{rem.VersionKey(k), rem.ClaimKey(k), rem.IndexKey(k, 1)} {
					cmd := c.B().Get().Key(sib).Build() // valkey-go's own routing
					if got := cmd.Slot(); got != slot {
						t.Fatalf("%s in slot %d, %s in %d", sib, got, rem.Key(k), slot)
					}
				}
			}
		}
		var ks []remote.KeyState
		// Keys of every master, and 70 keys of one slot ("s}0", "s}1", ...
		// all hash "s"): one call writes them in batches of one slot each.
		var same []string
		for i := range 70 {
			same = append(same, "s}"+strconv.Itoa(i))
		}
		for _, keys := range append(keysOnEveryMaster(t, rem, cl, "k", 3), same) {
			for _, k := range keys {
				st := remote.State{Algorithm: ringlimit.FixedWindow, Window: 60000, A: time.Now().UnixMilli() / 60000, B: 2}
				ks = append(ks, remote.KeyState{Key: k, State: st, TTL: time.Minute, Ver: remote.Version{Epoch: 2}})
			}
		}
		cl.FlushScripts()
		if err := rem.WriteStates(ctx, ks); err != nil {
			t.Fatal(err)
		}
		for i := range ks { // late writes of an older version
			ks[i].State.B, ks[i].Ver.Epoch = 1, 1
		}
		if err := rem.WriteStates(ctx, ks); err != nil {
			t.Fatal(err)
		}
		if n := rem.StaleWrites(); n != uint64(len(ks)) {
			t.Fatalf("%d stale writes of %d", n, len(ks))
		}
		for _, k := range ks {
			ld, err := rem.ClaimState(ctx, k.Key, remote.Claim{Member: "n1", TTL: time.Minute})
			if err != nil || !ld.Found || ld.State.B != 2 || ld.Ver.Epoch != 2 || ld.Holder != "" {
				t.Fatalf("ClaimState(%s) = %+v, %v", k.Key, ld, err)
			}
			if ld, err := rem.ClaimState(ctx, k.Key, remote.Claim{Member: "n2", TTL: time.Minute}); err != nil || ld.Holder != "n1" {
				t.Fatalf("ClaimState(%s) by n2 = %+v, %v; want n1's claim", k.Key, ld, err)
			}
		}
	})

	t.Run("MasterDown", func(t *testing.T) {
		// Keys of a dead master's slots fail at once; the others answer.
		rem := remote.New(c, remote.Config{Prefix: "down:"})
		keys := keysOnEveryMaster(t, rem, cl, "k", 3)
		rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 100, Window: time.Hour}
		cl.Masters[1].Kill()
		for m, ks := range keys {
			for _, k := range ks {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				_, err := rem.AllowN(cctx, k, rule, 1)
				cancel()
				if (err != nil) != (m == 1) {
					t.Fatalf("master 1 down: key %s of master %d: %v", k, m, err)
				}
			}
		}
		cl.Masters[1].Restart()
		cl.WaitOK()
		deadline := time.Now().Add(10 * time.Second)
		for _, k := range keys[1] {
			for {
				d, err := rem.AllowN(ctx, k, rule, 1)
				if err == nil {
					if d.Remaining != rule.Limit-1 { // the restarted master starts empty
						t.Fatalf("after restart %s: %+v", k, d)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("key %s of the restarted master: %v", k, err)
				}
				time.Sleep(10 * time.Millisecond) // poll the client's reconnect
			}
		}
	})
}

// BenchmarkCluster compares decisions/s at 32 callers on one master and on a
// 3-master cluster (reached through one seed), side by side in one run.
func BenchmarkCluster(b *testing.B) {
	single := valkeytest.Start(b)
	cl := valkeytest.StartCluster(b, 3)
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 1000, Window: time.Second}
	for _, c := range []struct {
		name   string
		client valkey.Client
	}{{"masters=1", dial(b, single.Addr())}, {"masters=3", dialCluster(b, cl)}} {
		l := remote.New(c.client, remote.Config{Prefix: "bench:"})
		b.Run(c.name+"/callers=32", func(b *testing.B) {
			// "-": no server command statistics (INFO reaches one master).
			measure(b, c.client, 32, "-", func(ctx context.Context, i int) error {
				_, err := l.AllowN(ctx, keys[i%benchKeys], rule, 1)
				return err
			})
		})
	}
}
