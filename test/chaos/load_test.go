package chaos

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

// The rule every scenario applies: a sliding log over an hour, so its
// window covers the whole scenario and every admission counts against the
// limit until the end.
const (
	ruleAlgorithm = "sliding_log"
	ruleLimit     = 10
	ruleWindow    = time.Hour
)

// Load shape: each worker sends at most one call per tick to a random node
// that is up, on a random key of the current key set. Bounded by calls, time
// and Stop.
const (
	loadWorkers  = 6
	loadTick     = 2 * time.Millisecond // at most ~3000 calls/s in all
	loadMaxCalls = 200_000              // per worker
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
	attemptsBy        map[string]int // node called → calls
	allowedBy         map[string]int // node called → admitted
	allowedFrom       map[string]int // source → admitted
}

type sample struct {
	at     time.Time
	lat    time.Duration
	source string
}

// load drives calls through the nodes' HTTP endpoint and records them.
type load struct {
	c    *cluster
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

func startLoad(c *cluster, keys []string) *load {
	ctx, cancel := context.WithTimeout(context.Background(), loadMaxTime)
	l := &load{c: c, cancel: cancel, perKey: map[string]*keyStat{}, sources: map[string]int{}}
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
	for _, p := range l.c.procs {
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
		var up []*proc
		for _, p := range l.c.procs {
			if p.up.Load() {
				up = append(up, p)
			}
		}
		if len(up) == 0 {
			continue
		}
		p := up[rand.IntN(len(up))]
		keys := *l.keys.Load()
		key := keys[rand.IntN(len(keys))]
		l.call(ctx, p, key)
	}
}

func (l *load) call(ctx context.Context, p *proc, key string) {
	epoch := p.epoch.Load()
	u := "http://" + p.httpAdr + "/v1/allow?key=" + url.QueryEscape(key) +
		"&algorithm=" + ruleAlgorithm + "&limit=" + fmt.Sprint(ruleLimit) + "&window=" + ruleWindow.String()
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
	lat := time.Since(start)
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
		l.samples = append(l.samples, sample{start, lat, d.Source})
	}
	l.sources[d.Source]++
	ks := l.perKey[key]
	if ks == nil {
		ks = &keyStat{attemptsBy: map[string]int{}, allowedBy: map[string]int{}, allowedFrom: map[string]int{}}
		l.perKey[key] = ks
	}
	ks.attempts++
	ks.attemptsBy[p.name]++
	if d.Allowed {
		ks.allowed++
		ks.allowedBy[p.name]++
		ks.allowedFrom[d.Source]++
	}
}

// latencies returns the latencies of calls started in [from, to).
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
// and was decided by source got its answer, polling until deadline; -1 if
// none.
func (l *load) firstSource(from time.Time, source string, deadline time.Duration) time.Duration {
	end := time.Now().Add(deadline)
	for {
		l.mu.Lock()
		for _, s := range l.samples {
			if !s.at.Before(from) && s.source == source {
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
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
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
