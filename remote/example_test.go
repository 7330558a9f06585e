package remote_test

import (
	"context"
	"fmt"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/remote"
)

// A token bucket of 10 requests per second, bursts of 20, shared by every
// process that uses the same server. (It needs a server on 127.0.0.1:6379, so
// it is compiled but not run by go test.)
func Example() {
	client, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:       []string{"127.0.0.1:6379"},
		DisableCache:      true, // counters gain nothing from client-side caching
		ForceSingleClient: true, // one server, not a cluster
	})
	if err != nil {
		fmt.Println("no server:", err)
		return
	}
	defer client.Close()

	limiter := remote.New(client, remote.Config{}) // keys "rl:{...}", the server's clock
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d, err := limiter.AllowN(ctx, "user:42", rule, 1)
	switch {
	case err != nil:
		fmt.Println("store unavailable:", err) // a failover.Limiter decides what then
	case d.Allowed:
		fmt.Println("allowed; remaining", d.Remaining)
	default:
		fmt.Println("limited; retry after", d.RetryAfter)
	}
}
