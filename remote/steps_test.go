// The worked examples of the seeds and DESIGN (internal/seedsteps, the same
// tables local's tests run), against a real server.

package remote_test

import (
	"fmt"
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/seedsteps"
	"github.com/ringlimit/ringlimit/remote"
)

// newRemote returns a factory of remote Limiters on one server, each under a
// prefix of its own so that cases do not share keys.
func newRemote(t *testing.T) func(*testing.T, ringlimit.Clock) ringlimit.Limiter {
	_, c := server(t)
	n := 0
	return func(_ *testing.T, clk ringlimit.Clock) ringlimit.Limiter {
		n++
		return remote.New(c, remote.Config{Clock: clk, Prefix: fmt.Sprintf("steps%d:", n)})
	}
}

func TestWorkedExamples(t *testing.T) { seedsteps.Run(t, ringlimit.Store, newRemote(t)) }

func TestLeakyBucketBurstDelays(t *testing.T) { seedsteps.RunLeakyBurst(t, newRemote(t)) }
