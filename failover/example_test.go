package failover_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/local"
)

// downStore stands for a central store that cannot be reached.
type downStore struct{}

var errDown = errors.New("store: connection refused")

func (downStore) AllowN(context.Context, string, ringlimit.Rule, int64) (ringlimit.Decision, error) {
	return ringlimit.Decision{}, errDown
}
func (downStore) Peek(context.Context, string, ringlimit.Rule) (ringlimit.Decision, error) {
	return ringlimit.Decision{}, errDown
}
func (downStore) Reset(context.Context, string) error { return errDown }

// Three nodes share a limit of 30 an hour while the store is down: each
// admits its share, 10.
func Example() {
	l := failover.New(downStore{}, failover.Config{
		Policy: failover.LocalShare,
		Local:  local.New(local.Config{}),
		Share:  func() int { return 3 }, // the live nodes
	})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 30, Window: time.Hour}
	allowed := 0
	var d ringlimit.Decision
	for range 20 {
		d, _ = l.AllowN(context.Background(), "user:42", rule, 1)
		if d.Allowed {
			allowed++
		}
	}
	fmt.Println("allowed:", allowed, "of 20; source:", d.Source, "; breaker:", l.State())
	// Output: allowed: 10 of 20; source: fallback ; breaker: open
}

// A Breaker in front of something that is not a Limiter, such as a peer
// connection.
func ExampleBreaker() {
	b := failover.NewBreaker(failover.BreakerConfig{Name: "peer api-2", MaxFailures: 2})
	call := func() error { return errDown } // the peer is down
	for range 3 {
		done, err := b.Allow()
		if err != nil {
			fmt.Println("rejected:", err)
			continue
		}
		if call() != nil {
			done(failover.Failure)
		} else {
			done(failover.Success)
		}
	}
	fmt.Println("state:", b.State())
	// Output:
	// rejected: failover: breaker open
	// state: open
}
