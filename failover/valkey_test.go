package failover_test

import (
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// newStore connects to srv and returns the real store, remote.Limiter; the
// client is closed when the test ends.
func newStore(t testing.TB, srv *valkeytest.Server) *remote.Limiter {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{
		InitAddress:       []string{srv.Addr()},
		DisableCache:      true,
		ForceSingleClient: true,
	})
	if err != nil {
		t.Fatalf("valkey client: %v", err)
	}
	t.Cleanup(c.Close)
	return remote.New(c, remote.Config{})
}
