package failover_test

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// A master of a 3-master cluster is killed under load: the keys of its
// slots go to the policy, the other masters' keys are still decided by the
// store, and no caller sees an error. After a restart its keys come back.
func TestClusterMasterDown(t *testing.T) {
	cl := valkeytest.StartCluster(t, 3)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: cl.Addrs()[:1], DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rem := remote.New(c, remote.Config{})
	if err := rem.RefreshShards(ctx); err != nil {
		t.Fatal(err)
	}
	l := failover.New(rem, failover.Config{Shard: rem.Shard, Cooldown: 100 * time.Millisecond, Timeout: 200 * time.Millisecond})
	keys := make([][]string, 3) // by master
	for i := 0; len(keys[0]) < 8 || len(keys[1]) < 8 || len(keys[2]) < 8; i++ {
		k := "k" + strconv.Itoa(i)
		m := cl.Master(int(rem.Slot(k)))
		keys[m] = append(keys[m], k)
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1 << 30, Window: time.Second}

	// load runs rounds over every key from 4 callers and counts the
	// decisions' sources by master.
	load := func(rounds int) (bySource [3][4]int64) {
		var counts [3][4]atomic.Int64
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range rounds {
					for m, ks := range keys {
						k := ks[(g+r)%len(ks)]
						d, err := l.AllowN(ctx, k, rule, 1)
						if err != nil {
							t.Errorf("%s (master %d): %v", k, m, err)
							return
						}
						counts[m][d.Source].Add(1)
					}
				}
			}()
		}
		wg.Wait()
		for m := range counts {
			for s := range counts[m] {
				bySource[m][s] = counts[m][s].Load()
			}
		}
		return bySource
	}

	if got := load(10); got[0][ringlimit.Store] != 40 || got[1][ringlimit.Store] != 40 || got[2][ringlimit.Store] != 40 {
		t.Fatalf("healthy cluster: sources by master %v", got)
	}
	cl.Masters[1].Kill()
	// A burst on the dead master's keys alone: enough consecutive failures
	// to open a breaker (one breaker for the whole store would then send
	// every key to the policy for a cooldown).
	for i := range 10 {
		if d, err := l.AllowN(ctx, keys[1][i%8], rule, 1); err != nil || d.Source != ringlimit.Fallback {
			t.Fatalf("dead master's key: %+v, %v", d, err)
		}
	}
	got := load(25)
	t.Logf("master 1 down: decisions by master and source (local, peer, store, fallback): %v", got)
	if got[0][ringlimit.Store] != 100 || got[2][ringlimit.Store] != 100 {
		t.Fatalf("live masters' keys not all decided by the store: %v", got)
	}
	if got[1][ringlimit.Fallback] != 100 {
		t.Fatalf("dead master's keys: %v, want 100 from the fallback", got[1])
	}
	// Only the dead master's breaker has tripped. It is open, or half-open
	// if the 100 ms cooldown ran out during the load (a busy host): its
	// probes fail and reopen it, as the fallback count above shows.
	st := l.Stats()
	var tripped []string
	for _, s := range st.Shards {
		if s.State != failover.StateClosed {
			tripped = append(tripped, s.Shard+" "+s.State.String())
		}
	}
	if len(tripped) != 1 || !strings.HasPrefix(tripped[0], cl.Masters[1].Addr()+" ") || st.State == failover.StateClosed || st.Opens == 0 {
		t.Fatalf("breakers not closed %v (aggregate %s, %d opens), want only %s's", tripped, st.State, st.Opens, cl.Masters[1].Addr())
	}

	cl.Masters[1].Restart()
	cl.WaitOK()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := l.AllowN(ctx, keys[1][0], rule, 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Source == ringlimit.Store {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted master's keys still %+v", d)
		}
		time.Sleep(10 * time.Millisecond) // poll: the breaker probes after its cooldown
	}
	if got := load(10); got[1][ringlimit.Store] != 40 {
		t.Fatalf("after restart: %v", got)
	}
	if l.State() != failover.StateClosed {
		t.Fatalf("after restart the aggregate breaker is %s", l.State())
	}
}
