package ringlimit_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// Validate bounds a Window by MaxWindow, the most the peer wire of every
// version carries: a rule that validates can be forwarded to any node. The
// documented exact domain (1 ms to 24 h, Limit and Burst up to 1,000,000)
// stays valid.
func TestValidateWindowBound(t *testing.T) {
	for _, c := range []struct {
		rule ringlimit.Rule
		ok   bool
	}{
		{ringlimit.Rule{Limit: 1_000_000, Window: time.Millisecond}, true},
		{ringlimit.Rule{Limit: 1_000_000, Burst: 1_000_000, Window: 24 * time.Hour}, true},
		{ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 1_000_000, Window: 24 * time.Hour}, true},
		{ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 1_000_000, Window: 24 * time.Hour}, true},
		{ringlimit.Rule{Limit: 1, Window: 100 * 365 * 24 * time.Hour}, true},
		{ringlimit.Rule{Limit: 1, Window: ringlimit.MaxWindow}, true},
		{ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: ringlimit.MaxWindow + time.Millisecond}, false},
		{ringlimit.Rule{Limit: 1, Window: 1752000 * time.Hour}, false}, // the demo's ?window=1752000h (issue 28)
		{ringlimit.Rule{Limit: 1, Window: math.MaxInt64 / time.Millisecond * time.Millisecond}, false},
		{ringlimit.Rule{Limit: 1, Window: 1 << 62 / time.Millisecond * time.Millisecond}, true},
		{ringlimit.Rule{Limit: 1, Window: (1<<62/time.Millisecond + 1) * time.Millisecond}, false},
	} {
		err := c.rule.Validate()
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ringlimit.ErrInvalidRule)) {
			t.Errorf("%+v: Validate() = %v, want ok %v", c.rule, err, c.ok)
		}
	}
}
