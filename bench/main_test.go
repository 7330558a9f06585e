package bench

import (
	"testing"

	"go.uber.org/goleak"
)

// The floors and clusters of this package start goroutines; every one must
// end with its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
