package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit"
)

// The rule every /v1/allow request of the generator asks for: small enough
// that the hot keys go over it, and a fixed window so that what was admitted
// in each window can be counted exactly and held against the limit.
const (
	checkLimit  = 10
	checkWindow = time.Second
)

// counters are what the generator saw, for one node or one phase.
type counters struct {
	Requests   atomic.Uint64 // sent
	Allowed    atomic.Uint64 // 2xx, and the login's 401 (an attempt admitted and refused)
	Denied     atomic.Uint64 // 429
	Errors     atomic.Uint64 // anything else from a node that was up
	ToKilled   atomic.Uint64 // failures of requests to a node killed meanwhile
	Dropped    atomic.Uint64 // not sent: every worker was busy
	Sources    [4]atomic.Uint64
	LastErrMsg atomic.Pointer[string]
}

// target is a node the generator may send to.
type target struct {
	name, addr string
	up         func() bool
}

// traffic sends a mix of requests to the nodes that are up: the demo API
// (items, posts, search), logins, and /v1/allow decisions. It sends only to
// 127.0.0.1, at most rate requests a second with at most workers in flight.
type traffic struct {
	rate, keys, hot, workers int
	targets                  []target
	client                   *http.Client
	perNode                  []*counters
	total                    counters

	phase   atomic.Pointer[phase] // where the current counts go
	mu      sync.Mutex
	checks  map[checkWindowKey]int      // admitted /v1/allow hits per key and window
	sources map[checkWindowKey][4]int32 // and by whom (ringlimit.Source)
}

type checkWindowKey struct {
	key    string
	window int64 // window index: ms since the epoch / window
}

func newTraffic(rate, keys, hot int, targets []target) *traffic {
	t := &traffic{rate: rate, keys: max(keys, 1), hot: min(max(hot, 0), max(keys, 1)), workers: 32, targets: targets,
		checks: map[checkWindowKey]int{}, sources: map[checkWindowKey][4]int32{}}
	t.client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: t.workers, IdleConnTimeout: 5 * time.Second}}
	for range targets {
		t.perNode = append(t.perNode, new(counters))
	}
	return t
}

// run sends until ctx is done, then waits for the requests in flight.
func (t *traffic) run(ctx context.Context) {
	jobs := make(chan int, t.workers)
	var wg sync.WaitGroup
	for range t.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for i := range jobs {
				t.send(ctx, rng, i)
			}
		}()
	}
	defer func() {
		close(jobs)
		wg.Wait()
		t.client.CloseIdleConnections()
	}()
	if t.rate <= 0 {
		<-ctx.Done()
		return
	}
	const tick = 10 * time.Millisecond // sub-ms timers are not honoured
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	start, sent, next := time.Now(), 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			due := int(now.Sub(start).Seconds() * float64(t.rate))
			for ; sent < due; sent++ {
				i := t.pick(&next)
				if i < 0 {
					continue
				}
				select {
				case jobs <- i:
				default:
					t.count(i, func(c *counters) { c.Dropped.Add(1) })
				}
			}
		}
	}
}

// pick returns the next node that is up, round robin, or -1.
func (t *traffic) pick(next *int) int {
	for range t.targets {
		i := *next % len(t.targets)
		*next++
		if t.targets[i].up() {
			return i
		}
	}
	return -1
}

// count applies f to the node's, the phase's and the total counters.
func (t *traffic) count(node int, f func(*counters)) {
	f(t.perNode[node])
	f(&t.total)
	if p := t.phase.Load(); p != nil {
		f(&p.counters)
	}
}

func (t *traffic) key(rng *rand.Rand) string {
	if t.hot > 0 && rng.IntN(10) < 6 {
		return fmt.Sprintf("hot-%d", rng.IntN(t.hot))
	}
	return fmt.Sprintf("key-%d", rng.IntN(t.keys))
}

// send makes one request of the mix to node i and counts its outcome.
func (t *traffic) send(ctx context.Context, rng *rand.Rand, i int) {
	base := "http://" + t.targets[i].addr
	key := t.key(rng)
	var req *http.Request
	check := false
	switch r := rng.IntN(100); {
	case r < 40:
		check = true
		req, _ = http.NewRequestWithContext(ctx, "GET", base+"/v1/allow?"+url.Values{
			"key": {"check:" + key}, "algorithm": {"fixed_window"},
			"limit": {fmt.Sprint(checkLimit)}, "window": {checkWindow.String()}}.Encode(), nil)
	case r < 60:
		req, _ = http.NewRequestWithContext(ctx, "GET", base+"/api/items", nil)
	case r < 70:
		req, _ = http.NewRequestWithContext(ctx, "POST", base+"/api/posts", nil)
	case r < 85:
		req, _ = http.NewRequestWithContext(ctx, "GET", base+"/api/search?q=x", nil)
	default:
		ok := rng.IntN(5) == 0
		req, _ = http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("%s/login?user=%s&ok=%t", base, key, ok), nil)
	}
	req.Header.Set("X-Api-Key", key)
	t.count(i, func(c *counters) { c.Requests.Add(1) })
	sent := time.Now()
	resp, err := t.client.Do(req)
	if err != nil {
		t.failed(ctx, i, err.Error())
		return
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		t.count(i, func(c *counters) { c.Denied.Add(1) })
	case resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusUnauthorized:
		if check {
			var d decisionJSON
			if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
				t.failed(ctx, i, "decoding /v1/allow: "+err.Error())
				return
			}
			t.decided(i, key, d, sent, time.Now())
			return
		}
		t.count(i, func(c *counters) { c.Allowed.Add(1) })
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		t.failed(ctx, i, fmt.Sprintf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, body))
	}
}

// decided counts a /v1/allow decision, sent at sent and received at recv,
// and an admitted hit in its window (windowOf) and under its source.
func (t *traffic) decided(i int, key string, d decisionJSON, sent, recv time.Time) {
	src, _ := parseSource(d.Source)
	t.count(i, func(c *counters) { c.Sources[src].Add(1) })
	if !d.Allowed {
		t.count(i, func(c *counters) { c.Denied.Add(1) })
		return
	}
	t.count(i, func(c *counters) { c.Allowed.Add(1) })
	k := checkWindowKey{key, windowOf(sent, recv, d.ResetAfterMS)}
	t.mu.Lock()
	t.checks[k]++
	s := t.sources[k]
	s[src]++
	t.sources[k] = s
	t.mu.Unlock()
}

// windowOf is the index of the fixed window a decision sent at sent and
// received at recv was made in, given its ResetAfter (in whole ms, so the
// window ends within a millisecond after decision time + resetMS): the
// decision was made between sent and recv, so the window ends at a
// multiple of the window at or after sent+resetMS and below recv+resetMS+2
// (both times truncated to the ms), of which there is one while the round
// trip is shorter than a window. (Taken from recv
// alone, a reply held for over half a window, as under a CPU quota, was
// counted in the window after its own, which then looked over its limit.)
// Without ResetAfter (a fail-open decision) it is recv's window.
func windowOf(sent, recv time.Time, resetMS int64) int64 {
	w := checkWindow.Milliseconds()
	if resetMS <= 0 {
		return recv.UnixMilli() / w
	}
	lo, hi := sent.UnixMilli()+resetMS, recv.UnixMilli()+resetMS+2
	end := (lo + w - 1) / w
	if hi-lo >= w || end*w >= hi {
		end = ((lo+hi)/2 + w/2) / w // a round trip of a window or more: the nearest to its middle
	}
	return end - 1
}

func (t *traffic) failed(ctx context.Context, i int, msg string) {
	if ctx.Err() != nil { // shutting down: not the cluster's fault
		return
	}
	if !t.targets[i].up() {
		t.count(i, func(c *counters) { c.ToKilled.Add(1) })
		return
	}
	t.count(i, func(c *counters) { c.Errors.Add(1); c.LastErrMsg.Store(&msg) })
}

func parseSource(s string) (ringlimit.Source, bool) {
	for src := ringlimit.Local; src <= ringlimit.Fallback; src++ {
		if src.String() == s {
			return src, true
		}
	}
	return ringlimit.Fallback, false
}

// windowSources returns who decided the admitted hits of key's window.
func (t *traffic) windowSources(k checkWindowKey) map[string]int {
	t.mu.Lock()
	s := t.sources[k]
	t.mu.Unlock()
	out := map[string]int{}
	for src, n := range s {
		if n > 0 {
			out[sourceName(src)] = int(n)
		}
	}
	return out
}

// windowCounts returns the admitted hits per key and window so far.
func (t *traffic) windowCounts() map[checkWindowKey]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[checkWindowKey]int, len(t.checks))
	for k, v := range t.checks {
		out[k] = v
	}
	return out
}
