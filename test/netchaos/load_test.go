package netchaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

// rule is what the load asks for on every call.
type rule struct {
	algorithm string
	limit     int
	window    time.Duration
}

// chaosRule is the failure scenarios' rule, as test/chaos's: a sliding log
// over an hour, so every admission counts against the limit to the end.
var chaosRule = rule{"sliding_log", 10, time.Hour}

// Load shape: each worker sends at most one call per tick to a random node
// that is up, on a random key of the current key set. Bounded by calls, time
// and stop. Lighter than test/chaos's: five containers share 2 cores.
const (
	loadWorkers  = 4
	loadTick     = 4 * time.Millisecond // at most ~1000 calls/s in all
	loadMaxCalls = 100_000              // per worker
	loadMaxTime  = 3 * time.Minute
)

// decision mirrors chaosnode's /v1/allow answer.
type decision struct {
	Allowed bool   `json:"allowed"`
	Source  string `json:"source"`
	Owner   string `json:"owner"`
	Error   string `json:"error"`
}

// keyStat is what the harness saw for one key.
type keyStat struct {
	attempts, allowed int
	allowedBy         map[string]int // node called → admitted
	allowedFrom       map[string]int // source → admitted
	first, last       time.Time      // first call's start, last call's end
	admits            []time.Time    // each admission's answer time
}

type sample struct {
	at     time.Time
	lat    time.Duration
	node   string
	source string
}

// load drives calls through the nodes' HTTP endpoint and records them.
type load struct {
	c    *cluster
	rule rule
	keys atomic.Pointer[[]string]

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	perKey     map[string]*keyStat
	sources    map[string]int
	calls      int
	errs       int      // errors from nodes the harness had not taken down
	errSamples []string // the first few
	deadCalls  int      // calls in flight to a node when the harness took it down
	deadErrs   int      // of those, the ones that failed
	samples    []sample // latencies of calls to nodes that stayed up
}

func startLoad(c *cluster, r rule, keys []string) *load {
	ctx, cancel := context.WithTimeout(context.Background(), loadMaxTime)
	l := &load{c: c, rule: r, cancel: cancel, perKey: map[string]*keyStat{}, sources: map[string]int{}}
	l.keys.Store(&keys)
	for range loadWorkers {
		l.wg.Add(1)
		go l.worker(ctx)
	}
	return l
}

// setKeys switches the load to another key set.
func (l *load) setKeys(keys []string) { l.keys.Store(&keys) }

// stop stops the load and waits for the workers.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
	for _, p := range l.c.nodes {
		p.tr.CloseIdleConnections()
	}
}

func (l *load) worker(ctx context.Context) {
	defer l.wg.Done()
	tick := time.NewTicker(loadTick)
	defer tick.Stop()
	for range loadMaxCalls {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var up []*cnode
		for _, p := range l.c.nodes {
			if p.up.Load() {
				up = append(up, p)
			}
		}
		if len(up) == 0 {
			continue
		}
		p := up[rand.IntN(len(up))]
		keys := *l.keys.Load()
		l.call(ctx, p, keys[rand.IntN(len(keys))])
	}
}

func (l *load) call(ctx context.Context, p *cnode, key string) {
	epoch := p.epoch.Load()
	u := p.base() + "/v1/allow?key=" + url.QueryEscape(key) +
		"&algorithm=" + l.rule.algorithm + "&limit=" + fmt.Sprint(l.rule.limit) + "&window=" + l.rule.window.String()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	start := time.Now()
	resp, err := p.client.Do(req)
	var d decision
	if err == nil {
		err = json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, d.Error)
		}
	}
	end := time.Now()
	lat := end.Sub(start)
	if ctx.Err() != nil {
		return // the harness stopped the load: not a call
	}
	dead := p.epoch.Load() != epoch // the harness took the node down meanwhile

	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if dead {
		l.deadCalls++
	}
	if err != nil {
		if dead {
			l.deadErrs++
		} else {
			l.errs++
			if len(l.errSamples) < 5 {
				l.errSamples = append(l.errSamples, fmt.Sprintf("%s %s after %s: %v", p.name, key, lat, err))
			}
		}
		return
	}
	if !dead {
		l.samples = append(l.samples, sample{start, lat, p.name, d.Source})
	}
	l.sources[d.Source]++
	ks := l.perKey[key]
	if ks == nil {
		ks = &keyStat{allowedBy: map[string]int{}, allowedFrom: map[string]int{}, first: start}
		l.perKey[key] = ks
	}
	ks.attempts++
	ks.last = end
	if d.Allowed {
		ks.allowed++
		ks.allowedBy[p.name]++
		ks.allowedFrom[d.Source]++
		ks.admits = append(ks.admits, end)
	}
}

// latencies returns the latencies of calls started in [from, to) to nodes
// not in skip.
func (l *load) latencies(from, to time.Time) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Duration
	for _, s := range l.samples {
		if !s.at.Before(from) && s.at.Before(to) {
			out = append(out, s.lat)
		}
	}
	slices.Sort(out)
	return out
}

// firstSource returns how long after from the first call that started then
// and was decided by one of sources got its answer, polling until
// deadline; -1 if none.
func (l *load) firstSource(from time.Time, deadline time.Duration, sources ...string) time.Duration {
	end := time.Now().Add(deadline)
	for {
		l.mu.Lock()
		for _, s := range l.samples {
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

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))]
}

// makeKeys returns perNode keys owned by each member of the ring of names
// (the ring is deterministic given the names, and the nodes use the default
// virtual nodes), and each key's owner.
func makeKeys(prefix string, names []string, perNode int) ([]string, map[string]string) {
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
