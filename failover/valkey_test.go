package failover_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
)

// storeLimiter is a test-only primary on a real server: a fixed window per
// key (from the key's first hit, not epoch-aligned) in one EVAL round trip.
// The real one is remote.Limiter.
type storeLimiter struct {
	c      valkey.Client
	script *valkey.Lua
}

const fixedWindowLua = `
local n, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur + math.max(n, 1) > limit then
  return {0, limit - cur, redis.call('PTTL', KEYS[1])}
end
if n > 0 then
  cur = redis.call('INCRBY', KEYS[1], n)
  if cur == n then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
end
return {1, limit - cur, redis.call('PTTL', KEYS[1])}
`

// newStore connects to srv and returns the primary; the client is closed when
// the test ends.
func newStore(t testing.TB, srv *valkeytest.Server) *storeLimiter {
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
	return &storeLimiter{c: c, script: valkey.NewLuaScript(fixedWindowLua)}
}

var _ ringlimit.Limiter = (*storeLimiter)(nil)

func (s *storeLimiter) AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if err := ringlimit.ValidateCall(key, rule, n); err != nil {
		return ringlimit.Decision{}, err
	}
	v, err := s.script.Exec(ctx, s.c, []string{"t:" + key},
		[]string{strconv.FormatInt(n, 10), strconv.FormatInt(rule.Limit, 10), strconv.FormatInt(rule.WindowMillis(), 10)},
	).AsIntSlice()
	if err != nil {
		return ringlimit.Decision{}, fmt.Errorf("storeLimiter: eval: %w", err)
	}
	d := ringlimit.Decision{Allowed: v[0] == 1, Limit: rule.Limit, Remaining: max(v[1], 0), Source: ringlimit.Store}
	if v[2] > 0 {
		d.ResetAfter = time.Duration(v[2]) * time.Millisecond
		if !d.Allowed {
			d.RetryAfter = d.ResetAfter
		}
	}
	return d, nil
}

func (s *storeLimiter) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return s.AllowN(ctx, key, rule, 0)
}

func (s *storeLimiter) Reset(ctx context.Context, key string) error {
	if err := ringlimit.ValidateKey(key); err != nil {
		return err
	}
	if err := s.c.Do(ctx, s.c.B().Del().Key("t:"+key).Build()).Error(); err != nil {
		return fmt.Errorf("storeLimiter: del: %w", err)
	}
	return nil
}

func TestStoreLimiterDecides(t *testing.T) {
	st := newStore(t, valkeytest.Start(t))
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 3, Window: time.Minute}
	for i, want := range []bool{true, true, true, false} {
		d, err := st.AllowN(ctx, "k", rule, 1)
		if err != nil || d.Allowed != want || d.Source != ringlimit.Store {
			t.Fatalf("call %d: %+v, %v; want Allowed %t from the store", i, d, err, want)
		}
	}
	if err := st.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d, err := st.AllowN(ctx, "k", rule, 3); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after Reset: %+v, %v", d, err)
	}
}
