package local_test

import (
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/seedsteps"
)

// Durations longer than a time.Duration saturate (the same table runs
// against remote).
func TestDurationsSaturate(t *testing.T) {
	seedsteps.RunCases(t, seedsteps.OverflowCases(), ringlimit.Local, newLocal)
}
