package netchaos

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// offsetClock is the system clock moved by a fixed offset.
type offsetClock time.Duration

func (o offsetClock) Now() time.Time { return time.Now().Add(time.Duration(o)) }

// TestSkewInProcess is the clock-skew scenarios in one process: three
// nodes (node/nodetest) whose Config.Clock runs skewOffsets from the
// system clock, a real store (write-behind on), and load on every node.
// Steady load, then a rolling restart (each node closes, handing its keys
// to the next owner on another clock, and comes back), then a crash: the
// node furthest behind is cut off from the others (it stays up, called by
// nobody), and its keys go to the successors, which load what it wrote
// behind. Every key is held to skew_test.go's bound.
func TestSkewInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("netchaos: skew in process: skipped in -short (it takes about 10s)")
	}
	store := valkeytest.Start(t)
	c := nodetest.Start(t, len(skewOffsets), func(cfg *node.Config) {
		var i int
		fmt.Sscanf(cfg.Name, "n%d", &i)
		cfg.Clock = offsetClock(skewOffsets[i-1])
		cfg.ValkeyAddrs = []string{store.Addr()}
	})
	var names []string
	for _, nd := range c.Nodes {
		names = append(names, nd.Name())
	}
	keys, owner := chaoskit.MakeKeys(t.Name(), names, keysPerNode)
	var targets []chaoskit.Target
	nodes := make([]*inprocNode, len(c.Nodes))
	for i, nd := range c.Nodes {
		nodes[i] = &inprocNode{}
		nodes[i].upAs(nd)
		targets = append(targets, nodes[i])
	}
	cfg := loadConfig(skewRule)
	// A call to a node being closed may fail with ErrClosed; only so.
	cfg.Excused = func(err error) bool { return errors.Is(err, ringlimit.ErrClosed) }
	l := chaoskit.StartLoad(cfg, targets, keys)
	defer l.Stop()

	time.Sleep(2 * time.Second) // steady load
	for i := range c.Nodes {
		nodes[i].Off()
		nodes[i].upAs(c.Restart(t, i))
	}
	v := 0 // skewOffsets[0] is the furthest behind
	nodes[v].Off()
	c.Network.Partition([]string{names[v]}, names[v+1:])
	c.WaitMembers(t, 10*time.Second, c.Nodes[v+1:]...)
	time.Sleep(2 * time.Second) // load on the survivors
	res := l.Stop()

	if res.Errs > 0 {
		t.Errorf("%d caller errors from nodes that were up, e.g. %v", res.Errs, res.ErrSamples)
	}
	var worstGap time.Duration
	extra := 0
	for _, k := range keys {
		ks := res.PerKey[k]
		if ks == nil || ks.Attempts < 2*skewRule.Limit {
			t.Fatalf("key %s: too few calls (%v)", k, ks)
		}
		allow := skewAllowance(ks.Last.Sub(ks.First))
		moves, lag := 1, 0 // its owner restarted once
		if owner[k] == names[v] {
			moves, lag = 2, 2 // and crashed
		}
		b := allow + moves*skewMove() + lag
		extra = max(extra, ks.Allowed-allow)
		if ks.Allowed > b {
			t.Errorf("key %s (owner %s): admitted %d, bound %d (fault-free allowance %d over %s, %d moves × %d, lag %d; by source %v)",
				k, owner[k], ks.Allowed, b, allow, ks.Last.Sub(ks.First).Round(time.Millisecond), moves, skewMove(), lag, ks.AllowedFrom)
		}
		if g := maxGap(ks); g > gapBound() {
			t.Errorf("key %s (owner %s) waited %s between two admissions; bound %s", k, owner[k], g.Round(time.Millisecond), gapBound())
		}
		worstGap = max(worstGap, maxGap(ks))
	}
	t.Logf("clocks %v, rule %s %d per %s: %d calls; most admitted beyond the fault-free allowance %d (a move to a clock ahead may add %d); longest wait between admissions %s (bound %s)",
		skewOffsets, skewRule.Algorithm, skewRule.Limit, skewRule.Window, res.Calls, extra, skewMove(), worstGap.Round(time.Millisecond), gapBound())
}

// inprocNode is a node of a nodetest.Cluster as the load calls it:
// directly, in process.
type inprocNode struct {
	chaoskit.Switch
	nd atomic.Pointer[node.Node] // the node's current incarnation
}

var _ chaoskit.Target = (*inprocNode)(nil)

// upAs makes nd the node's incarnation and switches it on.
func (n *inprocNode) upAs(nd *node.Node) {
	n.nd.Store(nd)
	n.On()
}

func (n *inprocNode) Name() string { return n.nd.Load().Name() }

func (n *inprocNode) Allow(ctx context.Context, key string, r chaoskit.Rule) (chaoskit.Decision, error) {
	alg, err := ringlimit.ParseAlgorithm(r.Algorithm)
	if err != nil {
		return chaoskit.Decision{}, err
	}
	d, err := n.nd.Load().AllowN(ctx, key, ringlimit.Rule{Algorithm: alg, Limit: int64(r.Limit), Window: r.Window}, 1)
	if err != nil {
		return chaoskit.Decision{}, err
	}
	return chaoskit.Decision{Allowed: d.Allowed, Source: d.Source.String()}, nil
}
