package ringlimit

import (
	"context"
	"fmt"
)

// MaxRules is the most rules one AllowAll call may apply to a key.
const MaxRules = 8

// MultiLimiter applies several rules to one key at once, all or nothing.
//
// AllowAll returns one Decision per rule, in order. If every rule admits n
// hits, every rule consumes them; if any rule denies, no rule consumes
// anything: the denying rules' Decisions have Allowed false, the others
// report what they would have left. Each (key, index in rules) has its own
// state, and index 0 is the state AllowN(ctx, key, rules[0], n) uses, so a
// caller with one rule and a caller with several agree on the first.
// len(rules) must be between 1 and MaxRules (else ErrInvalidRule); n == 0
// peeks every rule. Every Limiter of this module implements it.
type MultiLimiter interface {
	AllowAll(ctx context.Context, key string, rules []Rule, n int64) ([]Decision, error)
}

// Binding returns the Decision a response should report for the Decisions
// of one AllowAll call: if any denied, the denial that lasts longest (the
// greatest RetryAfter; the first of equals); else the one with the fewest
// hits Remaining (the first of equals). Binding of no Decisions is the zero
// Decision.
func Binding(ds []Decision) Decision {
	if len(ds) == 0 {
		return Decision{}
	}
	best := -1
	for i, d := range ds {
		if !d.Allowed && (best < 0 || d.RetryAfter > ds[best].RetryAfter) {
			best = i
		}
	}
	if best >= 0 {
		return ds[best]
	}
	best = 0
	for i, d := range ds[1:] {
		if d.Remaining < ds[best].Remaining {
			best = i + 1
		}
	}
	return ds[best]
}

// ValidateRules checks the rules of one AllowAll call: between 1 and
// MaxRules, each valid. The error wraps ErrInvalidRule and names the index.
func ValidateRules(rules []Rule) error {
	if len(rules) == 0 || len(rules) > MaxRules {
		return fmt.Errorf("%w: %d rules, want 1 to %d", ErrInvalidRule, len(rules), MaxRules)
	}
	for i := range rules {
		if err := rules[i].Validate(); err != nil {
			return fmt.Errorf("rules[%d]: %w", i, err)
		}
	}
	return nil
}
