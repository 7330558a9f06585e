package node_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/remote"
)

// byMaster returns per keys owned by owner (in nd's view) on each master of
// cl.
func byMaster(nd *node.Node, owner string, cl *valkeytest.Cluster, per int) [][]string {
	slots := remote.New(nil, remote.Config{}) // the node's default prefix; Slot needs no client
	out := make([][]string, len(cl.Masters))
	full := 0
	for _, k := range keysOwnedBy(nd, owner, 1<<12) {
		m := cl.Master(int(slots.Slot(k)))
		if len(out[m]) < per {
			if out[m] = append(out[m], k); len(out[m]) == per {
				full++
			}
		}
		if full == len(out) {
			return out
		}
	}
	panic("not enough keys")
}

// A node pointed at one seed of a 3-master cluster: its store path decides
// every algorithm exactly on every master, continues from what the owner
// wrote behind, and when a master dies only that master's keys go to the
// policy, with no caller error, until it is back.
func TestClusterStore(t *testing.T) {
	cl := valkeytest.StartCluster(t, 3)
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.ValkeyAddrs = cl.Addrs()[:1]
		cfg.StoreTimeout = 200 * time.Millisecond
	})
	a, b := c.Nodes[0], c.Nodes[1]
	// b's keys, asked at a with a's peer link to b cut: the store decides.
	c.Network.Drop(a.Name(), b.Name())
	keys := byMaster(a, b.Name(), cl, 8)
	probe := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1 << 20, Window: time.Hour}
	for m := range keys {
		waitFor(t, 10*time.Second, "the store on every master", func() bool {
			d, err := a.Allow(ctx, keys[m][0], probe)
			return err == nil && d.Source == ringlimit.Store
		})
	}
	for m := range keys {
		if err := a.Reset(ctx, keys[m][0]); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("Exact", func(t *testing.T) {
		for i, alg := range []ringlimit.Algorithm{ringlimit.TokenBucket, ringlimit.LeakyBucket,
			ringlimit.FixedWindow, ringlimit.SlidingLog, ringlimit.SlidingWindow} {
			rule := ringlimit.Rule{Algorithm: alg, Limit: 4, Window: time.Hour}
			for m := range keys {
				k := keys[m][1+i]
				admitted := 0
				for range 7 {
					d, err := a.Allow(ctx, k, rule)
					if err != nil || d.Source != ringlimit.Store {
						t.Fatalf("%s on master %d: %+v, %v", alg, m, d, err)
					}
					if d.Allowed {
						admitted++
					}
				}
				// The leaky bucket's first hit leaves the queue at once: a
				// millisecond later the queue holds one more.
				if admitted != 4 && (alg != ringlimit.LeakyBucket || admitted != 5) {
					t.Fatalf("%s on master %d: %d admitted of Limit 4", alg, m, admitted)
				}
			}
		}
	})

	t.Run("WriteBehind", func(t *testing.T) {
		// a owns these keys and decides them locally; its write-behind puts
		// them on every master; b, cut off from a, continues from there.
		own := byMaster(b, a.Name(), cl, 2)
		c.Network.Drop(b.Name(), a.Name())
		rule := ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 5, Window: time.Hour}
		for m := range own {
			for _, k := range own[m] {
				for range 3 {
					if d, err := a.Allow(ctx, k, rule); err != nil || d.Source != ringlimit.Local || !d.Allowed {
						t.Fatalf("owner: %+v, %v", d, err)
					}
				}
				waitFor(t, 5*time.Second, "the write-behind of "+k, func() bool {
					d, err := b.Peek(ctx, k, rule)
					return err == nil && d.Source == ringlimit.Store && d.Remaining == 2
				})
				admitted := 0
				for range 4 {
					d, err := b.Allow(ctx, k, rule)
					if err != nil || d.Source != ringlimit.Store {
						t.Fatalf("%s at b: %+v, %v", k, d, err)
					}
					if d.Allowed {
						admitted++
					}
				}
				if admitted != 2 {
					t.Fatalf("%s on master %d: the store admitted %d after the owner's 3 of 5", k, m, admitted)
				}
			}
		}
	})

	t.Run("MasterDown", func(t *testing.T) {
		rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1 << 20, Window: time.Second}
		cl.Masters[2].Kill()
		sources := make([]map[ringlimit.Source]int, len(keys))
		for round := range 20 {
			for m := range keys {
				if sources[m] == nil {
					sources[m] = map[ringlimit.Source]int{}
				}
				d, err := a.Allow(ctx, keys[m][round%len(keys[m])], rule)
				if err != nil {
					t.Fatalf("master %d down: a caller got %v", m, err)
				}
				sources[m][d.Source]++
			}
		}
		t.Logf("master 2 down: sources by master %v", sources)
		if sources[0][ringlimit.Store] != 20 || sources[1][ringlimit.Store] != 20 || sources[2][ringlimit.Fallback] != 20 {
			t.Fatalf("master 2 down: sources by master %v", sources)
		}
		var open []string
		for _, s := range a.Stats().Store.Shards {
			if s.State == failover.StateOpen {
				open = append(open, s.Shard)
			}
		}
		if len(open) != 1 || open[0] != cl.Masters[2].Addr() {
			t.Fatalf("open store breakers %v, want %s's only", open, cl.Masters[2].Addr())
		}
		cl.Masters[2].Restart()
		cl.WaitOK()
		waitFor(t, 10*time.Second, "the restarted master's keys back in the store", func() bool {
			d, err := a.Allow(ctx, keys[2][0], rule)
			if err != nil {
				t.Fatal(err)
			}
			return d.Source == ringlimit.Store
		})
	})
}
