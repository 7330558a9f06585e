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
	// ErrBadValue: a store holds something under the key that is not a
	// state ringlimit wrote (another type, another application's value,
	// corrupt bytes). A problem of that key, not of the store: package
	// failover answers such a key by its policy, and callers of a node
	// never see it.
	ErrBadValue = errors.New("ringlimit: bad stored value")
)

// ErrWaitTooLong: WaitN refused to wait, consuming nothing, because the
// hits could be admitted only after ctx's deadline, or further ahead than
// a key's queue of reservations reaches (see Waiter).
var ErrWaitTooLong = errors.New("ringlimit: wait too long")
