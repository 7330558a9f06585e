package ringlimit

import (
	"fmt"
	"strconv"
	"time"
)

// Algorithm names one of the five rate-limiting algorithms.
type Algorithm uint8

const (
	// TokenBucket: a bucket of Burst tokens refilled continuously at Limit per
	// Window; each hit takes a token. Bursts pass at once. The zero Algorithm.
	TokenBucket Algorithm = iota
	// LeakyBucket: a queue of Burst hits that lets one out every Window/Limit.
	// Admitted hits get a Delay, so callers that wait it act at a steady rate.
	LeakyBucket
	// FixedWindow: at most Limit hits per window; windows start at multiples
	// of Window since the Unix epoch.
	FixedWindow
	// SlidingLog: at most Limit hits in any interval of length Window, from a
	// log of admitted hits' timestamps. Exact, and the most memory.
	SlidingLog
	// SlidingWindow: the sliding window counter, which weighs the previous
	// fixed window's count by how much of it still overlaps.
	SlidingWindow

	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{
	"token_bucket", "leaky_bucket", "fixed_window", "sliding_log", "sliding_window",
}

// String returns the algorithm's name as ParseAlgorithm accepts it.
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm returns the Algorithm named s ("token_bucket",
// "leaky_bucket", "fixed_window", "sliding_log", "sliding_window").
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, name := range algorithmNames {
		if s == name {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q", ErrInvalidRule, s)
}

// MarshalText and UnmarshalText let an Algorithm appear by name in JSON and
// YAML.
func (a Algorithm) MarshalText() ([]byte, error) {
	if a >= numAlgorithms {
		return nil, fmt.Errorf("%w: unknown algorithm %d", ErrInvalidRule, a)
	}
	return []byte(a.String()), nil
}

func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// The exact domain. ringlimit keeps time as integer milliseconds and every
// state as integers, and the Valkey scripts compute with Lua numbers, which
// are doubles and exact only below 2^53. Validate admits a rule only if every
// intermediate value of its algorithm stays below that:
//
//   - Window is a whole number of milliseconds, at least 1 ms;
//   - max(Limit, Burst) × Window-in-ms ≤ MaxCapacityWindow (2^51);
//   - a SlidingLog Window is at most MaxLogWindow (2^32-1 ms, about 49 days);
//   - any Window is at most MaxWindow (about 146 years).
//
// This covers every Window from 1 ms to 24 h with Limit and Burst up to
// 1,000,000 (and far beyond: 24 h allows up to 26 million).
const (
	MaxCapacityWindow = 1 << 51
	MaxLogWindow      = (1<<32 - 1) * time.Millisecond
	// MaxWindow is the longest Window of any rule: 2^62 ns in whole
	// milliseconds, about 146 years. It is the one bound that Validate, the
	// peer wire (internal/peer, which carries the window in milliseconds
	// and has accepted up to this since its first version) and the Valkey
	// scripts (whose instants and TTLs stay below 2^53 with it) share, so
	// every rule that validates can be forwarded to any node, one of an
	// earlier release included.
	MaxWindow = 1 << 62 / time.Millisecond * time.Millisecond
	// MaxKeyLen is the longest key any Limiter accepts, in bytes.
	MaxKeyLen = 4096
)

// Rule says how many hits a key may take and how fast.
type Rule struct {
	Algorithm Algorithm
	Limit     int64         // hits allowed per Window (> 0)
	Window    time.Duration // > 0, whole milliseconds
	Burst     int64         // bucket capacity (TokenBucket, LeakyBucket); 0 means Limit
}

// Validate reports whether the rule is well formed and inside the exact domain
// (see MaxCapacityWindow). Its errors wrap ErrInvalidRule.
func (r Rule) Validate() error {
	switch {
	case r.Algorithm >= numAlgorithms:
		return fmt.Errorf("%w: unknown algorithm %d", ErrInvalidRule, r.Algorithm)
	case r.Limit <= 0:
		return fmt.Errorf("%w: limit %d is not positive", ErrInvalidRule, r.Limit)
	case r.Window <= 0:
		return fmt.Errorf("%w: window %s is not positive", ErrInvalidRule, r.Window)
	case r.Window%time.Millisecond != 0:
		return fmt.Errorf("%w: window %s is not a whole number of milliseconds", ErrInvalidRule, r.Window)
	case r.Window > MaxWindow:
		return fmt.Errorf("%w: window %s is over %s", ErrInvalidRule, r.Window, MaxWindow)
	case r.Burst < 0:
		return fmt.Errorf("%w: burst %d is negative", ErrInvalidRule, r.Burst)
	case r.Algorithm == SlidingLog && r.Window > MaxLogWindow:
		return fmt.Errorf("%w: sliding_log window %s is over %s", ErrInvalidRule, r.Window, MaxLogWindow)
	}
	w := r.WindowMillis()
	if m := max(r.Limit, r.Burst); m > MaxCapacityWindow/w {
		return fmt.Errorf("%w: %d hits per %s is outside the exact domain (max(limit, burst) × window in ms must be ≤ 2^51)",
			ErrInvalidRule, m, r.Window)
	}
	return nil
}

// WindowMillis is the rule's Window in milliseconds.
func (r Rule) WindowMillis() int64 { return int64(r.Window / time.Millisecond) }

// Capacity is the most hits one call can ask for: Burst (or Limit when Burst
// is zero) for the buckets, Limit for the others.
func (r Rule) Capacity() int64 {
	if (r.Algorithm == TokenBucket || r.Algorithm == LeakyBucket) && r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// ValidateKey reports whether key is usable: not empty and at most MaxKeyLen
// bytes. Its errors wrap ErrInvalidKey.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, over %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// ValidateCall checks the arguments of AllowN (n) or Peek (n = 0) the way
// every Limiter does, before anything is recorded: the key, the rule, and that
// 0 ≤ n ≤ rule.Capacity().
func ValidateCall(key string, rule Rule, n int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := rule.Validate(); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("%w: n %d is negative", ErrInvalidHits, n)
	}
	if c := rule.Capacity(); n > c {
		return fmt.Errorf("%w: n %d is over the capacity %d and could never pass", ErrInvalidHits, n, c)
	}
	return nil
}
