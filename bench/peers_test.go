package bench

import (
	"context"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"
)

// A peer decides one hit on a key: true if admitted.
type peer interface {
	take(key string) bool
}

// perSecond is the peers' rate per key: high enough that every hit of the
// benchmarks is admitted, so each measures its common path.
const perSecond = 1_000_000

var bg = context.Background()

// ringlimitPeer is local.AllowN on the system clock.
type ringlimitPeer struct {
	l    *local.Limiter
	rule ringlimit.Rule
}

// newRinglimit is a default limiter, with room for keys keys if they are
// more than the default (and for the shards' uneven share of them). At
// perSecond its rule is a bucket of a million hits refilled at one per 1000 s:
// every hit of a run is admitted, as with the peers, and no key's state stops
// mattering during the run (a faster refill would let ringlimit drop idle
// keys, and the benchmark would measure inserts).
func newRinglimit(keys int, limit int64) *ringlimitPeer {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: limit, Window: time.Second}
	if limit == perSecond {
		rule = ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1, Window: 1000 * time.Second, Burst: perSecond}
	}
	return &ringlimitPeer{
		l:    local.New(local.Config{MaxKeys: max(local.DefaultMaxKeys, keys+keys/8), MaxBytes: max(local.DefaultMaxBytes, int64(keys)*128)}),
		rule: rule,
	}
}

func (p *ringlimitPeer) take(key string) bool {
	d, _ := p.l.AllowN(bg, key, p.rule, 1)
	return d.Allowed
}

// goLimiterPeer is sethvargo/go-limiter's memorystore.Take.
type goLimiterPeer struct{ s limiter.Store }

func newGoLimiter(limit int64) *goLimiterPeer {
	s, err := memorystore.New(&memorystore.Config{Tokens: uint64(limit), Interval: time.Second})
	if err != nil {
		panic(err)
	}
	return &goLimiterPeer{s}
}

func (p *goLimiterPeer) take(key string) bool {
	_, _, _, ok, _ := p.s.Take(bg, key)
	return ok
}

func (p *goLimiterPeer) close() { p.s.Close(bg) }

// ratePeer is the hand-rolled map + Mutex of x/time/rate limiters.
type ratePeer struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	limit int64
}

func newRate(limit int64) *ratePeer {
	return &ratePeer{m: map[string]*rate.Limiter{}, limit: limit}
}

func (p *ratePeer) take(key string) bool {
	p.mu.Lock()
	l := p.m[key]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(p.limit), int(p.limit))
		p.m[key] = l
	}
	p.mu.Unlock()
	return l.Allow()
}
