package remote

import (
	"context"
	"fmt"
	"strconv"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
)

// giveScript gives back a charge (scripts/give.lua). Not retryable: a
// retry after it ran would give back twice.
var giveScript = valkey.NewLuaScript(giveSource())

func giveSource() string { return source("value.lua", "prelude.lua", "read.lua", "give.lua") }

// GiveBack takes back from key's state the n hits of an admitted charge
// that its caller did not use, and reports whether it gave anything: at
// is an instant (ms) at or before the charge on the store's clock (the
// server's TIME, or Config.Clock), remaining the charge's
// Decision.Remaining. It never gives more than the charge still weighs on
// the state, exactly as internal/memstore's GiveBack (which says what each
// algorithm gives), in one round trip. Bad input returns an error
// wrapping a ringlimit sentinel and sends nothing; a key holding a value
// the scripts did not write, ErrBadValue.
func (l *Limiter) GiveBack(ctx context.Context, key string, rule ringlimit.Rule, n, at, remaining int64) (bool, error) {
	if err := ringlimit.ValidateCall(key, rule, n); err != nil {
		return false, err
	}
	if n == 0 || at < 0 || remaining < 0 {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("remote: give back %s: %w", rule.Algorithm, err)
	}
	now := ""
	if l.clock != nil {
		now = strconv.FormatInt(l.clock.Now().UnixMilli(), 10)
	}
	args := []string{ruleArg(rule), now, strconv.FormatInt(n, 10), strconv.FormatInt(at, 10), strconv.FormatInt(remaining, 10)}
	resp := l.give.Exec(ctx, l.client, []string{l.Key(key), l.HoleKey(key)}, args)
	if err := resp.Error(); err != nil {
		return false, fmt.Errorf("remote: give back %s: %w", rule.Algorithm, callerErr(ctx, err))
	}
	v, err := resp.ToString()
	if err != nil {
		return false, fmt.Errorf("remote: give back %s: %w: %w", rule.Algorithm, errBadReply, err)
	}
	g, err := parseGive(v, rule, n)
	if err != nil {
		return false, fmt.Errorf("remote: give back %s: key %s: %w", rule.Algorithm, strconv.Quote(key), err)
	}
	return g > 0, nil
}

// parseGive decodes the give script's reply for n hits under rule: what it
// gave back, at most the n hits (in a bucket's units, n·Window). The
// store is not trusted: any other reply is an error wrapping errBadReply,
// or ErrBadValue for the script's answer to a foreign value.
func parseGive(v string, rule ringlimit.Rule, n int64) (int64, error) {
	if v == badValue {
		return 0, ErrBadValue
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: %d bytes", errBadReply, len(v))
	}
	most := n
	if rule.Algorithm == ringlimit.TokenBucket || rule.Algorithm == ringlimit.LeakyBucket {
		most = n * rule.WindowMillis()
	}
	g := word(v, 0)
	if g < 0 || g > most {
		return 0, fmt.Errorf("%w: gave back %d of at most %d", errBadReply, g, most)
	}
	return g, nil
}

// GiveBack is the Limiter's GiveBack, or ErrNotConnected (after validating
// the input).
func (k *Connector) GiveBack(ctx context.Context, key string, rule ringlimit.Rule, n, at, remaining int64) (bool, error) {
	l, err := k.limiter()
	if err != nil {
		if verr := ringlimit.ValidateCall(key, rule, n); verr != nil {
			return false, verr
		}
		return false, fmt.Errorf("remote: give back %s: %w", rule.Algorithm, err)
	}
	return l.GiveBack(ctx, key, rule, n, at, remaining)
}
