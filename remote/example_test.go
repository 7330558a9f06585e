package remote_test

import (
	"context"
	"crypto/tls"
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

// Options point the store at one server, a Valkey Cluster (its seed
// addresses), or a Sentinel-monitored master, with AUTH and TLS. Connect
// makes the client in the background.
func ExampleConnect() {
	opt := remote.Options{
		Addrs:    []string{"valkey-0.valkey:6379", "valkey-1.valkey:6379"}, // one server, or a cluster's seeds
		Username: "ringlimit",
		Password: "secret",
		TLS:      &tls.Config{ServerName: "valkey", MinVersion: tls.VersionTLS12},
		// Or, through Sentinel:
		// Sentinel: remote.SentinelOptions{MasterSet: "rl", Addrs: []string{"sentinel:26379"}},
	}
	store := remote.Connect(opt, remote.Config{Prefix: "rl:"}, remote.ConnectConfig{})
	defer store.Close()
}
