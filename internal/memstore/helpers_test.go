package memstore_test

import (
	"context"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/seedsteps"
)

var (
	ctx = context.Background()
	t0  = seedsteps.T0
)

var allAlgorithms = []ringlimit.Algorithm{
	ringlimit.TokenBucket, ringlimit.LeakyBucket, ringlimit.FixedWindow, ringlimit.SlidingLog, ringlimit.SlidingWindow,
}
