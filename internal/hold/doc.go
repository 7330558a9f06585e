// Package hold is the ownership core: the pure state machine that says, for
// one node, where each key is decided while ownership changes hands.
//
// A key's state is a token. One node holds it at a time, and only the holder
// decides on the key: that is what makes a cluster admit no more than one
// in-memory limiter would. Ownership by the consistent-hash ring only says
// where a call goes first; the state says where it is decided.
//
// The core takes events and returns actions (etcd raft's RawNode is the
// model): a call for a key, a view of the ring, a pushed state that arrived,
// a pull asked of this node, a pull's answer, a load from the store that
// ended, a member's Done, a push confirmed or refused. It has no goroutines,
// no sockets, no clock reads and no logging. The shell (the node) performs
// the actions: it decides with package local, moves states over the peer
// link and loads them from the store. The shell serialises the events of one
// key, and tells the core whether the key's state is here when it asks.
//
// # The protocol
//
//   - The holder decides, whatever its ring says. A node that gave a state
//     away keeps a mark (moved to X, with a copy of the state until X
//     confirms it) and sends the key's calls and pulls to X.
//   - A view of the ring leaves a source behind: for every key this node
//     gained, the member that owned it before may hold its state. A call on
//     such a key with no state here pulls it first, from every unresolved
//     source, newest first. A member resolves the sources that name it with
//     Done, once it has pushed every state it held for keys others own, when
//     its view is the receiver's and it expects no state itself. Once the
//     owners before are done, a call on such a key still asks, once, a
//     member of the change that has not said Done: a false death can leave
//     a state with a member the ring never gave the key. Nothing from it,
//     or no answer, and the key starts here.
//   - Done waits on Clean, and Clean on the others' Done: when views change
//     faster than a round of Done, members wait on each other for good. A
//     member with changes open and nothing on its way then asks every
//     other member of its view for its word (Idle, and its Arrivals),
//     twice; if every word held both times and no count moved, no state of
//     a key is anywhere but with its owner, or on its way, and Settle
//     resolves the changes (push.go states why). A member the view no
//     longer has, or has under another incarnation, is not asked: a change
//     that waits on the first is not settled (it may still hold what it
//     held); the second's predecessor is gone.
//   - A pull is answered with the state (which leaves the answerer with a
//     copy kept until the taker confirms, so an answer lost or late loses
//     nothing), with "moved to X" (a mark; also while a push of the state
//     to X is on its way), with "nothing here" (and a mark to the asker: it
//     holds the key from then on, and a state that reaches the answerer
//     later goes on to it), or with Mine: the answerer is taking the key
//     itself, and the asker's calls go there; or, from a leaver whose own
//     pull of the key asks another member, with Coming: it gives way to
//     the asker, what its pull finds is pushed there, and the asker waits
//     for it (asking again) rather than start the key. Two members that
//     pull a key from each other at once break the tie by name. A pull
//     names the incarnation it expects and carries the members it asked,
//     so a restarted member never answers for its predecessor and a cycle
//     of members that name each other ends. A member that said "moved to X"
//     is asked again if X holds nothing (its push may still be on the way,
//     and its copy is the state). The copy it then serves is a fork (an
//     origin of its own, Version.Fork): should the push arrive after all,
//     the two branches know each other, and a state is dropped as a late
//     copy only where what was passed on descends from it
//     (Version.Descends), never by epochs alone.
//   - A member that does not answer is asked again, and is never given up
//     while this node's view has it (the failure detector still has it
//     alive: it may be slow, starved, paused or cut off from this node
//     alone, and still deciding); nor while the membership still has it as
//     a leaver the view dropped early (Answer.Leaving: a leave is no death,
//     and a leaver may hold what it gave in an answer). Once the view drops
//     it (declared dead, or its port refused a connection: the shell drops
//     it then), it is
//     given up after a few unanswered pulls: it is told so (Dropped: a
//     state it gave in an answer that never arrived comes back to it), and
//     the key is loaded from the store, which holds what holders wrote
//     behind. A pull whose sources hold nothing asks, once each, the
//     members of the change that have not said Done (a leaver hands a key
//     to the owner of its own view, which may not be the ring's owner),
//     and a load never starts a key over another member's claim in the
//     store. With a store, a
//     key that no source holds is loaded too before it starts (its last
//     holder may have crashed and restarted under the same name).
//   - A leaving node refuses pushed states (their senders keep them, and
//     learn that it leaves: their shells drop it from their views), takes
//     no state back and promises none, and hands its own to the owners of
//     its latest view, again and again while any comes back, before it
//     leaves the gossip; and it leaves only once every state it gave (in a
//     push or a pull's answer) is confirmed (Unconfirmed, within a bound):
//     gone from the gossip, it can be asked nothing more. A pull of its
//     own waits for a live member as any pull does.
//   - States carry versions (see Version): a late or duplicate copy is
//     never installed over a newer state, and two states of one key that
//     started apart (two nodes that each took the key while they disagreed
//     on its owner) merge by adding what each consumed (local.Merge). A load
//     from the store starts a branch of its own, which merges with any
//     state of the key that arrives later (the store's copy may lag).
//
// A key can be decided in two places only when a holder becomes unreachable
// to the key's next owner and the failure detector drops it: a crash (what
// it did not write behind is lost), or a false death of a holder that was
// also cut off or paused (it still decides until it learns; see the
// package node's docs for the time-bounded authority this does not have
// yet). Each such episode can add at most the key's capacity.
//
// # The shell's side
//
// What the core assumes of its shell (node is one; the simulator's is
// another, in shell_test.go):
//
//   - One lock around every event and the local store's hand-over steps
//     it calls for. A Decide for Call is acted on under that lock: the
//     decision is made before any other event can take the state out. A
//     decision outside the lock is allowed only for a key whose state is
//     here (the local store decides it atomically), or while Quiet for a
//     key this node owns in the core's view.
//   - Install after Pulled, then Confirm to the member that answered
//     (unless the state came from the core's own copy); install means
//     merge (local.Merge) when a state is here already.
//   - A push gives the state away first (Gave, with the state's next
//     version), then sends; each item's answer is Confirmed or refused
//     (TakeBack: the copy comes back and is installed). A push is meant for
//     the incarnation of its target (Arrival.Inc). One that cannot be
//     delivered stays given (Pending resends it); the store gets a copy. A
//     state given in a pull's answer is GaveInAnswer; a Drop in Pulled's
//     action is sent to that member, which calls Dropped.
//   - Versions: a state started here has one origin of its own; it takes
//     Next at every hand-over, Seq rises with every write behind, and a
//     load is stored.Loaded (a branch of its own). Loaded must not be
//     followed by an import over a state that is here.
//   - The calls parked on a key (Wait) are decided when its pull ends here,
//     at that moment and under the lock, or sent to the member the pull's
//     end names; a call that stops waiting is taken off first.
//   - A retried forward may be decided twice: the shell sends a forwarded
//     call once and, without an answer, to the store (an episode of the
//     bound above only if the holder was unreachable).
//   - Done once per view, when the shell's pushes are confirmed and Clean
//     holds. View ids must differ when a member restarts (they include the
//     incarnations).
//   - A settle's word is Idle and every push confirmed, in the view asked
//     about, with Arrivals; the second round starts only once every answer
//     of the first came, and Settle is called under the lock only if this
//     node's own word held at the start of the first round and at the end
//     of the second.
//
// Nothing here waits for a timer: a busy machine delays the events, and the
// order of events is all the protocol depends on. The deterministic
// simulator in this package's tests drives the core with the real local
// store through seeded schedules (each seed has three: a classic one, a
// swarm one that draws which faults come and how they are shaped, and a
// stress one with delays past the timeouts) of delays, drops, cuts (one-way and both
// ways), pauses, false deaths, crashes with restarts, joins, leaves and
// rolling restarts (a leave, then the same name again), with node's leases
// of hot keys (granted from the holder's state, decided from, given back,
// recalled on a denial, stranded by a crash), and
// checks that every key admits no more than one exact limiter given the same
// calls (plus the bound for each episode above), that a denial strands no
// lease's hits, and that every call is answered. Replay a schedule with
//
//	go test ./internal/hold -run 'Simulation$' -args -sim.seed=N [-sim.swarm | -sim.stress]
//
// (add -sim.bug=NAME to replay it with one of TestSimulationMutations'
// planted bugs), and search longer with -sim.n=N (and -sim.first=S), or
// -sim.long.
package hold
