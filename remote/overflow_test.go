package remote_test

import (
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/seedsteps"
)

// Durations longer than a time.Duration saturate exactly as in local.
func TestDurationsSaturate(t *testing.T) {
	seedsteps.RunCases(t, seedsteps.OverflowCases(), ringlimit.Store, newRemote(t))
}
