package failover

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MaxShards bounds the breakers a Limiter keeps for Config.Shard's shards.
// Calls on shards beyond it share the breaker of the unknown shard "".
const MaxShards = 1024

// ShardStats are the breaker stats of one shard of the primary.
type ShardStats struct {
	Shard string // "" is the breaker of keys whose shard is unknown
	BreakerStats
	// Timeout is the shard's effective timeout now: what its next call
	// waits at most (see Config.Timeout).
	Timeout time.Duration
}

// guard is what stands in front of one shard: its breaker and the
// estimator of its timeout.
type guard struct {
	*Breaker
	rto *RTO
}

// shards holds one breaker per shard of the primary, created on a shard's
// first call. Lookups read an immutable map without locking.
type shards struct {
	shard          func(key string) string
	cfg            BreakerConfig // for new breakers; Name is the shard's prefix
	floor, ceiling time.Duration // for new estimators
	effective      func(*guard) time.Duration
	def            *guard // the unknown shard "", and shards beyond MaxShards
	byKey          atomic.Pointer[map[string]*guard]
	mu             sync.Mutex // serialises additions
}

func newShards(shard func(string) string, def *Breaker, cfg BreakerConfig, floor, ceiling time.Duration, effective func(*guard) time.Duration) *shards {
	s := &shards{shard: shard, cfg: cfg, floor: floor, ceiling: ceiling, effective: effective, def: &guard{def, NewRTO(floor, ceiling)}}
	s.byKey.Store(&map[string]*guard{})
	return s
}

// breaker returns the breaker that guards key's shard.
func (s *shards) breaker(key string) *guard {
	if s.shard == nil {
		return s.def
	}
	name := s.shard(key)
	if name == "" {
		return s.def
	}
	if b, ok := (*s.byKey.Load())[name]; ok {
		return b
	}
	return s.add(name)
}

// add returns the breaker of shard name, creating it unless MaxShards
// breakers exist.
func (s *shards) add(name string) *guard {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.byKey.Load()
	if b, ok := old[name]; ok {
		return b
	}
	if len(old) >= MaxShards {
		return s.def
	}
	m := make(map[string]*guard, len(old)+1)
	for k, b := range old {
		m[k] = b
	}
	c := s.cfg
	c.Name = s.cfg.Name + " " + name
	m[name] = &guard{NewBreaker(c), NewRTO(s.floor, s.ceiling)}
	s.byKey.Store(&m)
	return m[name]
}

// stats returns the aggregate breaker stats and, when the Limiter has a
// Shard function, each shard's (the unknown shard's first, then sorted).
// The aggregate's counters are the sums of every breaker's; its State is
// the worst (open, then half-open, then closed) of the named shards' if
// there are any, else the unknown shard's: a breaker of the unknown shard
// that opened before the shards were known (the store was not reachable
// yet) does not stand for the store after that.
func (s *shards) stats() (BreakerStats, []ShardStats) {
	agg := s.def.Stats()
	if s.shard == nil {
		return agg, nil
	}
	m := *s.byKey.Load()
	per := make([]ShardStats, 0, len(m)+1)
	per = append(per, ShardStats{BreakerStats: agg, Timeout: s.effective(s.def)})
	worst := StateClosed
	for name, b := range m {
		st := b.Stats()
		per = append(per, ShardStats{Shard: name, BreakerStats: st, Timeout: s.effective(b)})
		agg.StateChanges += st.StateChanges
		agg.Opens += st.Opens
		agg.Rejected += st.Rejected
		worst = max(worst, st.State) // closed < half-open < open
	}
	if len(m) > 0 {
		agg.State = worst
	}
	slices.SortFunc(per[1:], func(a, b ShardStats) int { return strings.Compare(a.Shard, b.Shard) })
	return agg, per
}

// state is the aggregate State of stats, without the counters.
func (s *shards) state() State {
	if s.shard == nil {
		return s.def.State()
	}
	m := *s.byKey.Load()
	if len(m) == 0 {
		return s.def.State()
	}
	worst := StateClosed
	for _, b := range m {
		worst = max(worst, b.State())
	}
	return worst
}
