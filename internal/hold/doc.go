// Package hold is the ownership core: the pure state machine that says, for
// one node, where each key is decided while ownership changes hands.
//
// A key's state is a token. Exactly one node holds it at a time, and only
// the holder decides on the key: that is what makes a cluster admit no more
// than one in-memory limiter would. Ownership by the consistent-hash ring only
// says where a call goes first; the state says where it is decided.
//
// The core takes events and returns actions (etcd raft's RawNode is the
// model): a call for a key, a ring change, a state that arrived, a pull asked
// of this node, a pull's answer, a peer found unreachable, a hand-off
// confirmed. It has no goroutines, no sockets, no clock reads and no
// logging. The node (package node) is the shell that performs the actions:
// it decides with package local, moves states over the peer link and loads
// them from the store. The shell serialises the events of one key (a lock),
// and tells the core whether the key's state is here (Has) when it asks.
//
// # The protocol
//
//   - A node that holds a key's state decides it, whatever its ring says.
//   - A node that gave a key's state away keeps a mark (moved to X) and
//     answers the key's calls and pulls with X, until the state expires.
//   - A ring change leaves a source behind: for every key this node gained,
//     the member that owned it in the ring before may hold its state. Until
//     that member resolves the source, a call on such a key with no state
//     here pulls the state from it first (and from every older unresolved
//     source, newest first) before it decides; "nothing here" from all of
//     them lets the key start afresh.
//   - A member resolves the sources that name it by sending Done after it
//     has pushed every state it held for keys others own, when its ring is
//     the receiver's ring and it has no unresolved source of its own (so
//     that nothing can still arrive at it for the receiver's keys).
//   - A pull is answered once: the state leaves with the answer, and the
//     mark left in its place sends the next pull on to the new holder.
//   - A source that cannot be reached (crashed, or cut off) is given up only
//     after the pull to it failed; the key is then loaded from the store,
//     which holds what the old holder wrote behind. That, and a store
//     decision while a holder is cut off, are the only ways a key can be
//     decided in two places: the README states the bound.
//
// Nothing here waits for a timer: a busy machine delays the events, and the
// order of events is all the protocol depends on. The deterministic
// simulator in this package's tests drives the core with the real local
// store through thousands of seeded schedules of delays, drops, partitions,
// pauses, false deaths, crashes, joins and leaves.
package hold
