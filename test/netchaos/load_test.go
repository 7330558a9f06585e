package netchaos

import (
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// chaosRule is the failure scenarios' rule, as test/chaos's: a sliding log
// over an hour, so every admission counts against the limit to the end.
var chaosRule = chaoskit.Rule{Algorithm: "sliding_log", Limit: 10, Window: time.Hour}

// Load shape: each worker sends at most one call per tick to a random node
// that is up, on a random key of the current key set. Bounded by calls, time
// and stop. Lighter than test/chaos's: five containers share 2 cores.
const (
	loadWorkers  = 4
	loadTick     = 4 * time.Millisecond // at most ~1000 calls/s in all
	loadMaxCalls = 100_000              // per worker
	loadMaxTime  = 3 * time.Minute
)

// loadConfig is the load of every scenario, asking for r.
func loadConfig(r chaoskit.Rule) chaoskit.LoadConfig {
	return chaoskit.LoadConfig{Rule: r, Workers: loadWorkers, Tick: loadTick, MaxCalls: loadMaxCalls, MaxTime: loadMaxTime}
}
