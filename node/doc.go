// Package node is the embeddable ringlimit node: the piece a service instance
// starts to take part in a cluster.
//
// # Routing
//
// Each call goes one way, top to bottom:
//
//  1. This node owns the key (by its snapshot of the consistent-hash ring):
//     it decides from its own memory (package local). Source Local; about
//     1.35× a bare local.AllowN (the key hashed once, for the ring and the
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
//	route.go    AllowN, Reset and the peer handler: the one chain. The clock
//	            is read once, the key hashed once, the ring read once. An
//	            owned key whose state is here, or any owned key while no key
//	            changes hands (holders.quiet), is decided by the local store
//	            under its own lock alone; else a bounded loop asks where the
//	            key is decided: here (decideHereAll), a peer (ask), the store
//	            (fromStore) or the policy. A "moved to X" answer sends the
//	            loop on to X, at most twice.
//	holders.go  who holds a key while ownership changes: one table of marks
//	            (moved to X, or settled here), striped locks under which every
//	            decision here and every hand-over of a state runs.
//	pull.go     a new owner without the key's state takes it from the
//	            previous holder (OpTake; concurrent pulls of one key share
//	            one), or loads it from the store if that holder is gone.
//	handoff.go  pushes on join and on Close: the states leave the local
//	            store under the key's lock, the batch is sent with no lock
//	            held, a copy stays in the mark until the target confirms.
//	moves.go    what a push after a ring change visits: the arcs this node
//	            lost (ring.Moved) and the stray keys (a state that arrived or
//	            started here while another member owned its key), so that a
//	            change costs what it moves, not a scan of every key.
//	ready.go    Ready: joined, and the initial hand-off received.
//	peers.go    connections to peers, each behind a breaker.
//	writebehind.go, store.go, state.go: the store tier and the states'
//	            encoding (ringlimit.State, shared with local and remote).
//
// The local store (package local) holds states only: decide, export and
// import, range and drain. It knows nothing of marks or owners.
//
// # Ownership changes
//
// A key's state follows the key when its owner changes, so a deploy or a
// scale-out admits nothing extra:
//
//   - Close first marks the node as leaving (every call on its keys is
//     redirected from then on), then pushes every state, in batches over a
//     second connection to each peer, to the key's owner in the ring without
//     this node, waits for each batch's answer, and only then leaves the
//     gossip. It keeps answering peers that have not noticed yet with "moved
//     to X" until they stop calling (at most a second).
//   - When a member joins, every node gives up the keys the new member owns
//     (a mark stays in their place for the hand-off window) and pushes their
//     states to it.
//   - For HandoffWindow after a ring change, a node that owns a key it holds
//     no state for asks the member it took the key from for it (a state
//     transfer, not a forwarded decision) before deciding; a node that gave
//     a key up answers its calls with the key's new holder, and the caller's
//     node goes on there. A pull that overtakes a push gets the copy the
//     push carries; the push then finds the state installed. Two holders of
//     one key never decide at once: a state leaves the local store and its
//     mark is set in one step under the key's lock, and a member that only
//     dropped out of the gossip for a moment keeps the keys given to it.
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
