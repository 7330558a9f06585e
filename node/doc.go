// Package node is the embeddable ringlimit node: the piece a service instance
// starts to take part in a cluster.
//
// # Routing
//
// Each call goes one way, top to bottom:
//
//  1. This node owns the key (by its snapshot of the consistent-hash ring):
//     it decides from its own memory (package local). Source Local; about
//     130 ns, no allocation.
//  2. A peer owns it: the call is forwarded over a persistent, authenticated
//     connection that carries many calls at once (package node/peer). The
//     peer decides from its own memory and never forwards again (one hop),
//     so two nodes with different views of the ring cannot bounce a call.
//     Source Peer.
//  3. The peer cannot answer within ForwardTimeout, or its breaker is open
//     after a few failures: the central store (Valkey, package remote)
//     decides, through a breaker and a timeout (package failover). Source
//     Store.
//  4. The store cannot answer either: the fail-open Policy decides. Source
//     Fallback.
//
// Only bad input, a closed node or the caller's cancelled context produce an
// error; a dead peer or store produces a decision from the next tier.
//
// # Security
//
// SecretKey encrypts gossip (AES-GCM, memberlist) and authenticates every
// peer connection with a challenge–response (HMAC-SHA256) in both directions
// before any frame is served. A node without the key cannot join or forward.
//
// # Lifecycle
//
// New binds the gossip and peer listeners, joins (retrying in the background
// if no Join address answers yet) and returns. Close leaves the cluster,
// stops the peer server, waits for every goroutine the node started and
// closes the store's client; it is idempotent.
package node
