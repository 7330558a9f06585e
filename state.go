package ringlimit

// State is one (key, index) state in the form every tier shares: local holds it in
// memory, remote's scripts store it as the key's value, and a node hands it
// to a key's next owner and writes it behind to the store. It lives here,
// beside Rule and Decision, because it is vocabulary that crosses tiers:
// local and remote never import each other, and both already import this
// package.
//
// The meaning of A, B and C depends on Algorithm:
//
//	TokenBucket, LeakyBucket: A = level (in 1/Window-ms of a hit), B = last update (ms)
//	FixedWindow:              A = window index (ms since the epoch / Window), B = count
//	SlidingWindow:            A = window index, B = current count, C = previous count
//	SlidingLog:               Log (A, B, C unused)
type State struct {
	Algorithm Algorithm
	Window    int64 // Rule.Window in ms: a call under another window starts afresh
	// Index is the state's place among the rules of AllowAll (0 to
	// MaxRules−1): a key holds one state per index, and index 0 is the one
	// AllowN uses. Every tier carries it with the state.
	Index int

	A, B, C int64
	Log     []LogEntry // SlidingLog: admitted hits, oldest first, stamps strictly increasing
	// Until is the instant (ms since the epoch) from which the state no
	// longer matters: from then on it decides as an empty state. The store
	// keeps it as the value's TTL instead, and ignores it in the value.
	Until int64
	// More are the key's states at other indexes, when the state stands
	// for all of a key's states: local's Take returns them so, Import
	// installs them, and a node hands them to the key's next owner
	// together. Nil elsewhere (Range, Drain and the store carry each
	// state on its own).
	More []State
}

// LogEntry is Count hits admitted at the same millisecond Stamp.
type LogEntry struct{ Stamp, Count int64 }
