package local_test

import (
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/seedsteps"
	"github.com/ringlimit/ringlimit/local"
)

// t0 is 1:00:00, on a minute boundary.
var t0 = seedsteps.T0

func newLocal(_ *testing.T, clk ringlimit.Clock) ringlimit.Limiter {
	return local.New(local.Config{Clock: clk})
}

// The seeds' and DESIGN's worked examples, as tables of calls at explicit
// instants (internal/seedsteps, shared with remote's tests).
func TestWorkedExamples(t *testing.T) { seedsteps.Run(t, ringlimit.Local, newLocal) }

func TestLeakyBucketBurstDelays(t *testing.T) { seedsteps.RunLeakyBurst(t, newLocal) }
