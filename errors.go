package ringlimit

import "errors"

// Sentinel errors shared by every Limiter. Implementations wrap them with
// detail; callers test with errors.Is.
var (
	// ErrInvalidRule: a Rule that Validate refuses.
	ErrInvalidRule = errors.New("ringlimit: invalid rule")
	// ErrInvalidKey: an empty key, or one longer than MaxKeyLen bytes.
	ErrInvalidKey = errors.New("ringlimit: invalid key")
	// ErrInvalidHits: n < 0, or more hits than the rule's capacity, which
	// could never pass.
	ErrInvalidHits = errors.New("ringlimit: invalid hits")
	// ErrClosed: the Limiter was closed.
	ErrClosed = errors.New("ringlimit: closed")
)
