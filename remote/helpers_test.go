package remote_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/valkeytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server starts a server for t and returns it with a client that t closes.
func server(t testing.TB) (*valkeytest.Server, valkey.Client) {
	t.Helper()
	srv := valkeytest.Start(t)
	return srv, dial(t, srv.Addr())
}

func dial(t testing.TB, addr string) valkey.Client {
	t.Helper()
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// cmdstat is one line of INFO commandstats.
type cmdstat struct{ calls, usec int64 }

// commandStats returns INFO commandstats by lower-case command name
// ("evalsha", "eval", "evalsha_ro", "del", ...).
func commandStats(t testing.TB, c valkey.Client) map[string]cmdstat {
	t.Helper()
	s, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	out := map[string]cmdstat{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdstat
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}

// scriptCalls is how many script and DEL commands the server has run.
func scriptCalls(t testing.TB, c valkey.Client) int64 {
	st := commandStats(t, c)
	return st["evalsha"].calls + st["eval"].calls + st["evalsha_ro"].calls + st["eval_ro"].calls + st["del"].calls
}
