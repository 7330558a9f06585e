package chaoskit

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// Rule is what the load asks for on every call.
type Rule struct {
	Algorithm string // as ringlimit.ParseAlgorithm reads it
	Limit     int
	Window    time.Duration
}

// Decision is a node's answer to one call: chaosnode's /v1/allow answer.
type Decision struct {
	Allowed bool   `json:"allowed"`
	Source  string `json:"source"` // local, peer, store or fallback
	Owner   string `json:"owner"`
	Error   string `json:"error"`
}

// Target is a node the load calls.
type Target interface {
	Name() string
	// Live reports whether the harness sends the node calls, and its
	// epoch (see Switch).
	Live() (up bool, epoch uint64)
	// Allow asks the node for one call of key under r.
	Allow(ctx context.Context, key string, r Rule) (Decision, error)
}

// Switch is whether the harness sends a node calls, and the node's epoch,
// which the harness bumps whenever it takes the node down: a call during
// which the epoch changed went to a node being taken down, and its error
// is the harness's doing, not the library's. The zero value is off. It is
// safe for simultaneous use by multiple goroutines.
//
// Both live in one word, so that Live reads them at one instant: read
// apart, a call could find the node on, then (after an Off between the
// two reads) the epoch Off had just bumped, and be counted as a call to a
// node that stayed up while the harness killed it (a churn run counted one
// such EOF as a caller error).
type Switch struct {
	w atomic.Uint64 // epoch<<1 | up
}

// On lets the load call the node.
func (s *Switch) On() { s.w.Or(1) }

// Off stops the load calling the node and bumps its epoch: call it before
// the fault.
func (s *Switch) Off() {
	for {
		w := s.w.Load()
		if s.w.CompareAndSwap(w, (w>>1+1)<<1) {
			return
		}
	}
}

// Live reports whether the node is on, and its epoch.
func (s *Switch) Live() (up bool, epoch uint64) {
	w := s.w.Load()
	return w&1 == 1, w >> 1
}

// LoadConfig is the shape of a load: each worker sends at most one call
// per tick to a random target that is up, on a random key of the current
// key set, until it has sent MaxCalls, MaxTime has passed or the load is
// stopped.
type LoadConfig struct {
	Rule     Rule
	Workers  int           // goroutines calling; if zero, no calls are made
	Tick     time.Duration // ticks under 1 ms (zero too) are 1 ms: these machines honour no less
	MaxCalls int           // per worker; if zero, no calls are made
	MaxTime  time.Duration // if zero, the load runs until Stop

	// Excused reports whether an error from a target the harness took down
	// during the call is expected (counted in DeadErrs, not Errs). If nil,
	// every such error is.
	Excused func(error) bool
}

// KeyStat is what the load saw for one key, from the calls that were
// answered.
type KeyStat struct {
	Attempts, Allowed int
	AllowedBy         map[string]int // target called → admitted
	AllowedFrom       map[string]int // source → admitted
	First, Last       time.Time      // the first call's start, the last call's answer
	Admits            []time.Time    // each admission's answer time
}

type sample struct {
	at     time.Time
	lat    time.Duration
	source string
}

// Result is what a load saw.
type Result struct {
	PerKey     map[string]*KeyStat
	Sources    map[string]int // source → decisions
	Calls      int
	Errs       int      // errors from targets the harness had not taken down (or did not excuse)
	ErrSamples []string // the first few
	DeadCalls  int      // calls in flight to a target when the harness took it down
	DeadErrs   int      // of those, the ones that failed (and were excused)
	samples    []sample // calls to targets that stayed up
}

// Latencies returns the latencies of the calls to targets that stayed up
// and started in [from, to), sorted.
func (r *Result) Latencies(from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, s := range r.samples {
		if !s.at.Before(from) && s.at.Before(to) {
			out = append(out, s.lat)
		}
	}
	slices.Sort(out)
	return out
}

func (r *Result) clone() *Result {
	c := *r
	c.PerKey = make(map[string]*KeyStat, len(r.PerKey))
	for k, ks := range r.PerKey {
		kc := *ks
		kc.AllowedBy, kc.AllowedFrom = maps.Clone(ks.AllowedBy), maps.Clone(ks.AllowedFrom)
		kc.Admits = slices.Clone(ks.Admits)
		c.PerKey[k] = &kc
	}
	c.Sources = maps.Clone(r.Sources)
	c.ErrSamples = slices.Clone(r.ErrSamples)
	c.samples = slices.Clone(r.samples)
	return &c
}

// Load drives calls to targets and records them. Its methods are safe for
// simultaneous use by multiple goroutines.
type Load struct {
	cfg     LoadConfig
	targets []Target
	keys    atomic.Pointer[[]string]

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	mu  sync.Mutex
	res Result
}

// StartLoad starts cfg.Workers workers calling targets on keys. Stop it.
func StartLoad(cfg LoadConfig, targets []Target, keys []string) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.MaxTime > 0 {
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), cfg.MaxTime)
	}
	l := &Load{
		cfg: cfg, targets: slices.Clone(targets), cancel: cancel,
		res: Result{PerKey: map[string]*KeyStat{}, Sources: map[string]int{}},
	}
	l.keys.Store(&keys)
	for range cfg.Workers {
		l.wg.Add(1)
		go l.worker(ctx)
	}
	return l
}

// SetKeys switches the load to another key set.
func (l *Load) SetKeys(keys []string) { l.keys.Store(&keys) }

// Stop stops the load, waits for the workers, closes the targets' idle
// connections (those with a CloseIdleConnections method), and returns what
// the load saw, which no longer changes. It is idempotent.
func (l *Load) Stop() *Result {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
		for _, tg := range l.targets {
			if c, ok := tg.(interface{ CloseIdleConnections() }); ok {
				c.CloseIdleConnections()
			}
		}
	})
	return &l.res
}

// Snapshot returns a copy of what the load has seen so far.
func (l *Load) Snapshot() *Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.res.clone()
}

// FirstSource returns how long after from the first call that started
// then, to a target that stayed up, and was decided by one of sources got
// its answer, polling until deadline; -1 if none.
func (l *Load) FirstSource(from time.Time, deadline time.Duration, sources ...string) time.Duration {
	end := time.Now().Add(deadline)
	for {
		l.mu.Lock()
		for _, s := range l.res.samples {
			if !s.at.Before(from) && slices.Contains(sources, s.source) {
				l.mu.Unlock()
				return s.at.Add(s.lat).Sub(from)
			}
		}
		l.mu.Unlock()
		if time.Now().After(end) {
			return -1
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

func (l *Load) worker(ctx context.Context) {
	defer l.wg.Done()
	tick := time.NewTicker(max(l.cfg.Tick, time.Millisecond))
	defer tick.Stop()
	for range l.cfg.MaxCalls {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var up []Target
		var epochs []uint64
		for _, tg := range l.targets {
			if ok, epoch := tg.Live(); ok {
				up = append(up, tg)
				epochs = append(epochs, epoch)
			}
		}
		if len(up) == 0 {
			continue
		}
		i := rand.IntN(len(up))
		keys := *l.keys.Load()
		l.call(ctx, up[i], epochs[i], keys[rand.IntN(len(keys))])
	}
}

// call makes one call to tg, found up in epoch: if the harness takes tg
// down after that (its epoch moves on), the call is the harness's doing.
func (l *Load) call(ctx context.Context, tg Target, epoch uint64, key string) {
	start := time.Now()
	d, err := tg.Allow(ctx, key, l.cfg.Rule)
	end := time.Now()
	lat := end.Sub(start)
	if ctx.Err() != nil {
		return // the harness stopped the load: not a call
	}
	_, now := tg.Live()
	dead := now != epoch // the harness took the target down meanwhile

	l.mu.Lock()
	defer l.mu.Unlock()
	r := &l.res
	r.Calls++
	if dead {
		r.DeadCalls++
	}
	if err != nil {
		if dead && (l.cfg.Excused == nil || l.cfg.Excused(err)) {
			r.DeadErrs++
		} else {
			r.Errs++
			if len(r.ErrSamples) < 5 {
				r.ErrSamples = append(r.ErrSamples, fmt.Sprintf("%s %s after %s: %v", tg.Name(), key, lat, err))
			}
		}
		return
	}
	if !dead {
		r.samples = append(r.samples, sample{start, lat, d.Source})
	}
	r.Sources[d.Source]++
	ks := r.PerKey[key]
	if ks == nil {
		ks = &KeyStat{AllowedBy: map[string]int{}, AllowedFrom: map[string]int{}, First: start}
		r.PerKey[key] = ks
	}
	ks.Attempts++
	ks.Last = end
	if d.Allowed {
		ks.Allowed++
		ks.AllowedBy[tg.Name()]++
		ks.AllowedFrom[d.Source]++
		ks.Admits = append(ks.Admits, end)
	}
}

// WarmUp runs cfg's load on targets for half a second, on two keys owned
// by each (peer connections, the store's connection), and fails t if any
// call failed.
func WarmUp(t testing.TB, cfg LoadConfig, targets []Target) {
	t.Helper()
	var names []string
	for _, tg := range targets {
		names = append(names, tg.Name())
	}
	warm, _ := MakeKeys(t.Name()+"-warm", names, 2)
	wl := StartLoad(cfg, targets, warm)
	time.Sleep(500 * time.Millisecond) // the warm-up's length
	if res := wl.Stop(); res.Errs > 0 {
		t.Fatalf("errors during warm-up: %v", res.ErrSamples)
	}
}

// Percentile returns the p-quantile (0 ≤ p ≤ 1) of sorted; 0 if empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))]
}

// MakeKeys returns perNode keys owned by each member of the ring of names
// (the ring is deterministic given the names, and the nodes use the
// default virtual nodes), and each key's owner.
func MakeKeys(prefix string, names []string, perNode int) ([]string, map[string]string) {
	r := ring.New(names, 0)
	count := map[string]int{}
	owner := map[string]string{}
	var keys []string
	for i := 0; len(keys) < perNode*len(names); i++ {
		k := fmt.Sprintf("%s-%d", prefix, i)
		o := r.Owner(k)
		if count[o] < perNode {
			count[o]++
			owner[k] = o
			keys = append(keys, k)
		}
	}
	return keys, owner
}
