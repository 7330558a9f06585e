package local

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
// allocates the returned slice and nothing else for keys already held.
//
// Each (key, index) is a state of its own for MaxKeys, MaxBytes, eviction
// and expiry: a state is evicted by its own cost, never while its key is
// being decided, and a key's other states outlive an evicted or expired
// index 0 as they would in Valkey, where each is a value with its own TTL.
func (l *Limiter) AllowAll(_ context.Context, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	ds, _, err := l.allowAll(key, 0, false, rules, l.now(), n, false, nil)
	return ds, err
}

// AllowAllAt is AllowAll at the instant now instead of the clock's.
func (l *Limiter) AllowAllAt(now time.Time, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	ds, _, err := l.allowAll(key, 0, false, rules, now.UnixMilli(), n, false, nil)
	return ds, err
}

// AllowAllHeldAt is AllowAllAt for a key that holds a state that still
// matters at one of the rules' indexes; for any other key it decides and
// records nothing and returns false (see AllowNHeldAt).
func (l *Limiter) AllowAllHeldAt(now time.Time, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, bool, error) {
	return l.allowAll(key, 0, false, rules, now.UnixMilli(), n, true, nil)
}

// AllowAllIfAt is AllowAllAt for a key whose Config.Hash is h, that decides
// a key holding no state that still matters at any of the rules' indexes
// only if fresh reports true, called under the key's lock; else it decides
// and records nothing and returns false (see AllowNIfAt).
func (l *Limiter) AllowAllIfAt(now time.Time, key string, h uint64, rules []ringlimit.Rule, n int64, fresh func() bool) ([]ringlimit.Decision, bool, error) {
	return l.allowAll(key, h, l.hash != nil, rules, now.UnixMilli(), n, true, fresh)
}

// allowAll decides key, whose place is h if hashed, else hashed here.
func (l *Limiter) allowAll(key string, h uint64, hashed bool, rules []ringlimit.Rule, now, n int64, held bool, fresh func() bool) ([]ringlimit.Decision, bool, error) {
	if uint(len(key)-1) >= ringlimit.MaxKeyLen {
		return nil, false, ringlimit.ValidateKey(key)
	}
	if len(rules) == 0 || len(rules) > ringlimit.MaxRules {
		return nil, false, fmt.Errorf("local: %w: %d rules, want 1 to %d", ringlimit.ErrInvalidRule, len(rules), ringlimit.MaxRules)
	}
	if !hashed {
		h = l.hashOf(key)
	}
	s, frag := l.place(h)
	ds := make([]ringlimit.Decision, len(rules))
	ok, err := s.applyAll(ds, key, frag, rules, now, n, held, fresh)
	if err != nil || !ok {
		return nil, false, err
	}
	return ds, true, nil
}
