package failover

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// MaxShards bounds the breakers a Limiter keeps for Config.Shard's shards.
// Calls on shards beyond it share the breaker of the unknown shard "".
const MaxShards = 1024

// ShardStats are the breaker stats of one shard of the primary.
type ShardStats struct {
	Shard string // "" is the breaker of keys whose shard is unknown
	BreakerStats
}

// shards holds one breaker per shard of the primary, created on a shard's
// first call. Lookups read an immutable map without locking.
type shards struct {
	shard func(key string) string
	cfg   BreakerConfig // for new breakers; Name is the shard's prefix
	def   *Breaker      // the unknown shard "", and shards beyond MaxShards
	byKey atomic.Pointer[map[string]*Breaker]
	mu    sync.Mutex // serialises additions
}

func newShards(shard func(string) string, def *Breaker, cfg BreakerConfig) *shards {
	s := &shards{shard: shard, cfg: cfg, def: def}
	s.byKey.Store(&map[string]*Breaker{})
	return s
}

// breaker returns the breaker that guards key's shard.
func (s *shards) breaker(key string) *Breaker {
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
func (s *shards) add(name string) *Breaker {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.byKey.Load()
	if b, ok := old[name]; ok {
		return b
	}
	if len(old) >= MaxShards {
		return s.def
	}
	m := make(map[string]*Breaker, len(old)+1)
	for k, b := range old {
		m[k] = b
	}
	c := s.cfg
	c.Name = s.cfg.Name + " " + name
	m[name] = NewBreaker(c)
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
	per = append(per, ShardStats{BreakerStats: agg})
	worst := StateClosed
	for name, b := range m {
		st := b.Stats()
		per = append(per, ShardStats{Shard: name, BreakerStats: st})
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
