package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit"
)

var _ ringlimit.MultiLimiter = (*Limiter)(nil)

// AllowAll applies every rule to key at once, all or nothing (see
// ringlimit.MultiLimiter): rules[i] decides on the key's state at index i,
// and index 0 is the state AllowN uses. All of a key's states live in its
// shard and are decided under the shard's lock in one step. A rule that
// admits while another denies reports what it has left now (nothing was
// consumed). Bad input returns an error wrapping a ringlimit sentinel
// (ErrInvalidRule for no rules or more than ringlimit.MaxRules) and records
// nothing. It reads the clock once and is AllowAllAt at that instant; it
// allocates the returned slice and nothing else for keys already held
// (AppendAll fills a slice of the caller's).
//
// Each (key, index) is a state of its own for MaxKeys, MaxBytes, eviction
// and expiry: a state is evicted by its own cost, never while its key is
// being decided, and a key's other states outlive an evicted or expired
// index 0 as they would in Valkey, where each is a value with its own TTL.
func (l *Limiter) AllowAll(_ context.Context, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	ds, _, err := l.allowAll(nil, key, 0, false, rules, l.now(), n, false, Gate{})
	return ds, err
}

// AppendAll is AllowAll, appending the decisions to dst and returning the
// extended slice (on an error, dst as it was): with room for them in dst
// it allocates nothing for keys already held, so a caller that keeps a
// buffer (or one on its stack: var buf [ringlimit.MaxRules]ringlimit.Decision)
// decides several limits without garbage.
func (l *Limiter) AppendAll(_ context.Context, dst []ringlimit.Decision, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	ds, _, err := l.allowAll(dst, key, 0, false, rules, l.now(), n, false, Gate{})
	return ds, err
}

// AllowAllAt is AllowAll at the instant now instead of the clock's.
func (l *Limiter) AllowAllAt(now time.Time, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	ds, _, err := l.allowAll(nil, key, 0, false, rules, now.UnixMilli(), n, false, Gate{})
	return ds, err
}

// AllowAllHeldAt is AllowAllAt for a key that holds a state that still
// matters at one of the rules' indexes; for any other key it decides and
// records nothing and returns false (see AllowNHeldAt).
func (l *Limiter) AllowAllHeldAt(now time.Time, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, bool, error) {
	return l.allowAll(nil, key, 0, false, rules, now.UnixMilli(), n, true, Gate{})
}

// AllowAllIfAt is AppendAll at the instant now for a key whose Config.Hash
// is h, that decides a key holding no state that still matters at any of
// the rules' indexes only if the gate opens, asked under the key's
// lock; else it decides and records nothing and returns dst and false (see
// AllowNIfAt).
func (l *Limiter) AllowAllIfAt(dst []ringlimit.Decision, now time.Time, key string, h uint64, rules []ringlimit.Rule, n int64, gate Gate) ([]ringlimit.Decision, bool, error) {
	return l.allowAll(dst, key, h, l.hash != nil, rules, now.UnixMilli(), n, true, gate)
}

// allowAll decides key, whose place is h if hashed, else hashed here, and
// appends the decisions to dst; it returns dst as it was if it decides
// nothing.
func (l *Limiter) allowAll(dst []ringlimit.Decision, key string, h uint64, hashed bool, rules []ringlimit.Rule, now, n int64, held bool, gate Gate) ([]ringlimit.Decision, bool, error) {
	if uint(len(key)-1) >= ringlimit.MaxKeyLen {
		return dst, false, ringlimit.ValidateKey(key)
	}
	if len(rules) == 0 || len(rules) > ringlimit.MaxRules {
		return dst, false, fmt.Errorf("local: %w: %d rules, want 1 to %d", ringlimit.ErrInvalidRule, len(rules), ringlimit.MaxRules)
	}
	if !hashed {
		h = l.hashOf(key)
	}
	s, frag := l.place(h)
	var all []ringlimit.Decision
	if cap(dst)-len(dst) >= len(rules) {
		all = dst[:len(dst)+len(rules)]
	} else { // one allocation, exactly (slices.Grow makes two under -race)
		all = make([]ringlimit.Decision, len(dst)+len(rules))
		copy(all, dst)
	}
	ok, err := s.applyAll(all[len(dst):], key, frag, rules, now, n, held, gate)
	if err != nil || !ok {
		return dst, false, err
	}
	return all, true, nil
}
