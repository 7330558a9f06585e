// Package node is the embeddable ringlimit node: the piece a service instance
// starts to take part in a cluster.
//
// # Routing
//
// Each call goes one way, top to bottom:
//
//  1. This node owns the key (by its snapshot of the consistent-hash ring):
//     it decides from its own memory (internal/memstore, package local's
//     store). Source Local; about 1.3× a bare local.AllowN in CPU time
//     (BenchmarkOwnedDecisionCPU: the key hashed once, for the ring and the
//     local store; one lock, the local store's), no allocation.
//  2. A peer owns it: the call is forwarded over a persistent, authenticated
//     connection that carries many calls at once (package internal/peer). The
//     peer decides from its own memory and never forwards again (one hop),
//     so two nodes with different views of the ring cannot bounce a call.
//     Source Peer.
//  3. The peer cannot answer within its effective timeout (what its
//     latencies and this node's lag call for, at most ForwardTimeout: see
//     Config), or its breaker is open on evidence of failure (refused
//     connections, or timeouts for half a second with no answer): the
//     central store (Valkey, package remote)
//     decides, through a breaker and a timeout (package failover). Source
//     Store.
//  4. The store cannot answer either: the fail-open Policy decides. Source
//     Fallback.
//
// Only bad input, a closed node or the caller's cancelled context produce an
// error; a dead peer or store produces a decision from the next tier.
//
// # Map of the code
//
// Following a key through AllowN reads top-down: one validation, one hash,
// one decision of where. In route.go:
//
//	AllowN, Allow, Peek, AllowAll (multi.go): one line each, into
//	call        the one chain of a call made here:
//	              validate  the key (AllowAll: its number of rules); the
//	                        rule and hits are checked once, where the
//	                        call is decided (the local store here, or
//	                        before it leaves this node);
//	              hash      the clock read once, the key hashed once (the
//	                        ring, the core and the local store all take
//	                        that hash);
//	              where     owned in this node's view: the owned path
//	                        (owned), the local store under its own lock
//	                        alone (the key's state is here, or no key
//	                        changes hands: owner.fresh), else the core
//	                        here (route);
//	                        a peer's: a lease this node holds (fromLease),
//	                        else route, from the owner (from the core
//	                        here while keys change hands);
//	              leased    the leases' one hook: a forward counts toward
//	                        a lease, a denial here recalls the key's
//	                        leases (and the call goes again if hits came
//	                        back), a Reset revokes them.
//	route       a bounded loop that asks where the key is decided: here
//	            (the core, then the local store), a peer (ask), the store
//	            (fromStore) or the policy. A "moved to X" answer sends it
//	            on to X. Reset and WaitN enter here.
//	Serve       a peer's call (ownerHandler): the owned path if it is
//	            answered on the connection's reader and owned here, else
//	            here (the core, then the local store); then leased. Never
//	            forwarded again.
//	own.go      the shell's hold on the ownership core (internal/hold): the
//	            core under one lock, the calls parked on a key while its
//	            state is on its way, the states' versions.
//	handoff.go  what the core's actions do: the push loop after a ring
//	            change (and Done), one pull per key (drivePull), the load
//	            from the store with its claim, the messages peers send
//	            (serveHold), Close's hand-off.
//	holdwire.go the hand-off messages on the peer link.
//	wait.go     WaitN: the key's holder reserves a waiter's turn, as a
//	            call is decided (waitwire.go: its messages).
//	lease.go    hot keys' leases: a borrower decides from a slice of the
//	            key's allowance its holder took from the state up front;
//	            the holder recalls them before it denies, for as long as
//	            the denied caller can wait (leasewire.go).
//	moves.go    what a push after a ring change visits: the arcs this node
//	            lost (ring.Moved) and the stray keys, so that a change costs
//	            what it moves, not a scan of every key.
//	ready.go    Ready: joined, and the change it joined with resolved.
//	peers.go    connections to peers, each behind a breaker.
//	writebehind.go, store.go, state.go: the store tier and the states'
//	            encoding (ringlimit.State, shared with local and remote).
//
// The local store (internal/memstore, the store behind package local, with
// the steps a hand-over needs: take and import, range and drain) holds
// states only. It knows nothing of owners.
//
// # Ownership changes
//
// A key's state is a token: one member holds it, and only the holder
// decides (internal/hold's package docs give the protocol, and its
// deterministic simulator checks it). So a deploy or a scale-out admits
// nothing extra:
//
//   - Close first makes the node leave in its core (every call on its keys
//     goes to the key's owner in the ring without it from then on, and
//     states pushed to it are refused), then pushes every state to that
//     owner, waits for each batch's answer, and only then leaves the
//     gossip. It answers peers that have not noticed yet with "moved to X".
//   - After a ring change, every node gives the states of keys another
//     member owns now to that member, and says Done to every member once
//     they are confirmed: a node that has every member's Done for a change
//     decides the keys it gained without asking anyone.
//   - Until then, a node that owns a key it holds no state for asks the
//     member that owned it before (a pull: a state transfer, not a
//     forwarded decision), which answers with the state, "moved to X", or
//     "nothing here"; a member it cannot reach is asked again before it is
//     given up on (slow is not dead), and then the key is loaded from the
//     store, which holds what holders wrote behind, claiming it there so
//     that two members that load one key apart do not both start it.
//   - A state keeps a version; a late or duplicate copy is never installed
//     over a newer one, and the store drops a write older than the version
//     it holds (fenced writes).
//
// Over-admission, by kind of failure (each bounded per key and episode):
//
//   - a graceful leave, a join, a rolling restart, a member wrongly
//     declared dead while it answers: none;
//   - a crash: what the crashed member admitted since its last write-behind
//     (at most one WriteBehind interval of its traffic on the key), plus
//     what callers sent to the store for its keys until the ring dropped it
//     (the store continues from the written state);
//   - a cut that outlasts the pull's retries (three unanswered pulls of
//     the member's effective timeout each): at most the key's capacity
//     again, once per cut, since the new owner starts from the store's copy;
//   - the store down as well as the holder unreachable: the key starts
//     afresh (at most its capacity again), or Policy decides.
//
// A crash loses only what was not yet written behind: with a Valkey store,
// the states of owned keys changed since the last write are written every
// WriteBehind (100 ms), pipelined, with TTLs, in the representation the
// store's scripts use. Peers that fall back to the store for a dead owner's
// keys continue from them, and a key's new owner loads its state from the
// store once. Decisions only set a bit in the key's entry; the writes run
// on the node's own goroutine, and a slow or down store fills a queue of at
// most WriteBehindQueue states whose oldest are dropped and counted.
//
// # Security
//
// SecretKey encrypts gossip (AES-GCM, memberlist) and authenticates every
// peer connection with a challenge–response (HMAC-SHA256) in both directions
// before any frame is served; every frame after it is sealed (AES-256-GCM
// under keys derived per connection and direction, with counter nonces), so
// a frame modified, replayed, dropped or reordered on the way closes the
// connection and its calls go on as for a dead peer. A node without the key
// cannot join or forward. SecretKeys lists other secrets a node accepts
// (while sending under SecretKey alone), so that a cluster rotates its
// secret in three rolling restarts without stopping (see Config.SecretKeys).
// The peer listener bounds what anyone can make it
// spend: MaxPeerConns authenticated connections, a small number in the
// handshake, deadlines on handshakes, records and idle connections (counted
// in Stats().Peer).
//
// # Lifecycle
//
// New binds the gossip and peer listeners, joins (retrying in the background
// if no Join address answers yet) and returns. Close hands the node's keys
// off, leaves the cluster, stops the peer server, waits for every goroutine
// the node started and closes the store's client; it is idempotent.
package node
