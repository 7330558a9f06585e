package netchaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
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
	keys, owner := makeKeys(t.Name(), names, keysPerNode)
	l := newInprocLoad(c.Nodes, keys)
	defer l.stop()

	time.Sleep(2 * time.Second) // steady load
	for i := range c.Nodes {
		l.down(i)
		nd := c.Restart(t, i)
		l.upAs(i, nd)
	}
	v := 0 // skewOffsets[0] is the furthest behind
	l.down(v)
	c.Network.Partition([]string{names[v]}, names[v+1:])
	c.WaitMembers(t, 10*time.Second, c.Nodes[v+1:]...)
	time.Sleep(2 * time.Second) // load on the survivors
	l.stop()

	if l.errs > 0 {
		t.Errorf("%d caller errors from nodes that were up, e.g. %v", l.errs, l.errSample)
	}
	var worstGap time.Duration
	extra := 0
	for _, k := range keys {
		ks := l.perKey[k]
		if ks == nil || ks.attempts < 2*skewRule.limit {
			t.Fatalf("key %s: too few calls (%v)", k, ks)
		}
		allow := skewAllowance(ks.last.Sub(ks.first))
		moves, lag := 1, 0 // its owner restarted once
		if owner[k] == names[v] {
			moves, lag = 2, 2 // and crashed
		}
		b := allow + moves*skewMove() + lag
		extra = max(extra, ks.allowed-allow)
		if ks.allowed > b {
			t.Errorf("key %s (owner %s): admitted %d, bound %d (fault-free allowance %d over %s, %d moves × %d, lag %d; by source %v)",
				k, owner[k], ks.allowed, b, allow, ks.last.Sub(ks.first).Round(time.Millisecond), moves, skewMove(), lag, ks.allowedFrom)
		}
		if g := maxGap(ks); g > gapBound() {
			t.Errorf("key %s (owner %s) waited %s between two admissions; bound %s", k, owner[k], g.Round(time.Millisecond), gapBound())
		}
		worstGap = max(worstGap, maxGap(ks))
	}
	t.Logf("clocks %v, rule %s %d per %s: %d calls; most admitted beyond the fault-free allowance %d (a move to a clock ahead may add %d); longest wait between admissions %s (bound %s)",
		skewOffsets, skewRule.algorithm, skewRule.limit, skewRule.window, l.calls, extra, skewMove(), worstGap.Round(time.Millisecond), gapBound())
}

// inprocLoad calls the nodes of a nodetest.Cluster directly.
type inprocLoad struct {
	rule   ringlimit.Rule
	keys   []string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu        sync.Mutex
	nodes     []*node.Node
	up        []bool
	epoch     []uint64
	perKey    map[string]*keyStat
	calls     int
	errs      int
	errSample []string
}

func newInprocLoad(nodes []*node.Node, keys []string) *inprocLoad {
	ctx, cancel := context.WithTimeout(context.Background(), loadMaxTime)
	alg, _ := ringlimit.ParseAlgorithm(skewRule.algorithm)
	l := &inprocLoad{
		rule: ringlimit.Rule{Algorithm: alg, Limit: int64(skewRule.limit), Window: skewRule.window},
		keys: keys, cancel: cancel,
		nodes:  append([]*node.Node(nil), nodes...),
		up:     make([]bool, len(nodes)),
		epoch:  make([]uint64, len(nodes)),
		perKey: map[string]*keyStat{},
	}
	for i := range l.up {
		l.up[i] = true
	}
	for range loadWorkers {
		l.wg.Add(1)
		go l.worker(ctx)
	}
	return l
}

func (l *inprocLoad) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}

func (l *inprocLoad) down(i int) {
	l.mu.Lock()
	l.up[i] = false
	l.epoch[i]++
	l.mu.Unlock()
}

func (l *inprocLoad) upAs(i int, nd *node.Node) {
	l.mu.Lock()
	l.nodes[i], l.up[i] = nd, true
	l.mu.Unlock()
}

func (l *inprocLoad) worker(ctx context.Context) {
	defer l.wg.Done()
	tick := time.NewTicker(loadTick)
	defer tick.Stop()
	for range loadMaxCalls {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.mu.Lock()
		var idx []int
		for i, u := range l.up {
			if u {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			l.mu.Unlock()
			continue
		}
		i := idx[rand.IntN(len(idx))]
		nd, epoch := l.nodes[i], l.epoch[i]
		l.mu.Unlock()
		key := l.keys[rand.IntN(len(l.keys))]
		start := time.Now()
		d, err := nd.AllowN(ctx, key, l.rule, 1)
		end := time.Now()
		if ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		dead := l.epoch[i] != epoch
		l.calls++
		switch {
		case err != nil && dead && errors.Is(err, ringlimit.ErrClosed):
		case err != nil:
			l.errs++
			if len(l.errSample) < 5 {
				l.errSample = append(l.errSample, fmt.Sprintf("%s %s: %v", nd.Name(), key, err))
			}
		default:
			ks := l.perKey[key]
			if ks == nil {
				ks = &keyStat{allowedBy: map[string]int{}, allowedFrom: map[string]int{}, first: start}
				l.perKey[key] = ks
			}
			ks.attempts++
			ks.last = end
			if d.Allowed {
				ks.allowed++
				ks.allowedFrom[d.Source.String()]++
				ks.admits = append(ks.admits, end)
			}
		}
		l.mu.Unlock()
	}
}
