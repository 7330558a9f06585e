package failover_test

import (
	"context"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// A key holding another application's value (a hash, or a string that is not
// ours) is that key's problem, not a store outage: against a real server,
// many calls on it are answered by the policy and counted in BadValues, the
// breaker stays closed, and other keys keep their decisions from the store.
func TestBadValuesDoNotOpenTheBreaker(t *testing.T) {
	srv := valkeytest.Start(t)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	store := remote.New(c, remote.Config{})
	for _, cmd := range []valkey.Completed{
		c.B().Hset().Key(store.Key("hash")).FieldValue().FieldValue("f", "v").Build(),
		c.B().Set().Key(store.Key("string")).Value("not ours").Build(),
	} {
		if err := c.Do(ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 3, Window: time.Hour}
	for _, tc := range []struct {
		policy  failover.Policy
		allowed bool
	}{{failover.Open, true}, {failover.Closed, false}} {
		l := failover.New(store, failover.Config{Policy: tc.policy, MaxFailures: 2, Timeout: time.Second})
		for i := range 20 {
			key := []string{"hash", "string"}[i%2]
			d, err := l.AllowN(ctx, key, rule, 1)
			if err != nil || d.Source != ringlimit.Fallback || d.Allowed != tc.allowed {
				t.Fatalf("%s, call %d on %q: %+v, %v; want Source fallback, allowed %v, no error", tc.policy, i, key, d, err, tc.allowed)
			}
		}
		st := l.Stats()
		if st.BadValues != 20 || st.State != failover.StateClosed || st.Opens != 0 || st.PrimaryErrors != 0 {
			t.Fatalf("%s: %+v; want 20 BadValues, the breaker closed, no primary errors", tc.policy, st)
		}
		for range 4 { // other keys: still the store's, exact
			key := "fine-" + tc.policy.String()
			d, err := l.AllowN(ctx, key, rule, 1)
			if err != nil || d.Source != ringlimit.Store {
				t.Fatalf("%s: another key: %+v, %v; want the store's decision", tc.policy, d, err)
			}
		}
	}
}
