package local_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/local"
)

func Example() {
	l := local.New(local.Config{}) // up to 1<<20 keys, the system clock
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 3, Window: time.Minute}

	for i := range 4 {
		d, err := l.AllowN(context.Background(), "login:alice", rule, 1)
		if err != nil {
			panic(err) // only bad input: an empty key, a bad rule, n < 0
		}
		fmt.Printf("attempt %d: allowed=%v remaining=%d retry in about %s\n",
			i+1, d.Allowed, d.Remaining, d.RetryAfter.Round(time.Minute))
	}
	// Output:
	// attempt 1: allowed=true remaining=2 retry in about 0s
	// attempt 2: allowed=true remaining=1 retry in about 0s
	// attempt 3: allowed=true remaining=0 retry in about 0s
	// attempt 4: allowed=false remaining=0 retry in about 1m0s
}

// frozen is a clock that stands still, so the example's output is exact.
type frozen struct{ t time.Time }

func (f frozen) Now() time.Time { return f.t }

// The leaky bucket smooths bursts: wait out Delay before acting, and the
// calls reach the backend at a steady rate.
func Example_leakyBucket() {
	l := local.New(local.Config{Clock: frozen{time.Now()}})
	rule := ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 10, Window: time.Second, Burst: 3}
	for range 4 {
		d, _ := l.AllowN(context.Background(), "backend", rule, 1)
		fmt.Printf("allowed=%v delay=%s retry=%s\n", d.Allowed, d.Delay, d.RetryAfter)
	}
	// Output:
	// allowed=true delay=0s retry=0s
	// allowed=true delay=100ms retry=0s
	// allowed=true delay=200ms retry=0s
	// allowed=false delay=0s retry=1ms
}
