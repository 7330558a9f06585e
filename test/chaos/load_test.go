package chaos

import (
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
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

// loadConfig is every scenario's load.
func loadConfig() chaoskit.LoadConfig {
	return chaoskit.LoadConfig{
		Rule:    chaoskit.Rule{Algorithm: ruleAlgorithm, Limit: ruleLimit, Window: ruleWindow},
		Workers: loadWorkers, Tick: loadTick, MaxCalls: loadMaxCalls, MaxTime: loadMaxTime,
	}
}

// startLoad starts the load on c's nodes.
func (c *cluster) startLoad(keys []string) *chaoskit.Load {
	return chaoskit.StartLoad(loadConfig(), c.Targets(), keys)
}
