package failover_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/seedsteps"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// newFailover returns a factory of failover Limiters in front of the real
// store on one server, each under a prefix of its own.
func newFailover(t *testing.T) func(*testing.T, ringlimit.Clock) ringlimit.Limiter {
	srv := valkeytest.Start(t)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("valkey client: %v", err)
	}
	t.Cleanup(c.Close)
	n := 0
	return func(_ *testing.T, clk ringlimit.Clock) ringlimit.Limiter {
		n++
		store := remote.New(c, remote.Config{Clock: clk, Prefix: fmt.Sprintf("steps%d:", n)})
		// A generous timeout: two loaded cores must not turn a row into a fallback.
		return failover.New(store, failover.Config{Timeout: 5 * time.Second})
	}
}

// The seeds' and DESIGN's worked examples (internal/seedsteps, the tables
// local's and remote's tests run), through the breaker to the real store.
func TestWorkedExamples(t *testing.T) { seedsteps.Run(t, ringlimit.Store, newFailover(t)) }

func TestLeakyBucketBurstDelays(t *testing.T) { seedsteps.RunLeakyBurst(t, newFailover(t)) }
