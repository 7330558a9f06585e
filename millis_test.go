package ringlimit_test

import (
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

func TestMillisSaturates(t *testing.T) {
	most := int64(math.MaxInt64 / int64(time.Millisecond))
	for _, c := range []struct {
		ms   int64
		want time.Duration
	}{
		{0, 0},
		{1, time.Millisecond},
		{most, time.Duration(most) * time.Millisecond},
		{most + 1, ringlimit.MaxDuration},
		{1 << 51, ringlimit.MaxDuration},
		{math.MaxInt64, ringlimit.MaxDuration},
		{-most - 1, -ringlimit.MaxDuration},
	} {
		if got := ringlimit.Millis(c.ms); got != c.want {
			t.Errorf("Millis(%d) = %d, want %d", c.ms, got, c.want)
		}
	}
}
