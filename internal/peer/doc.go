// Package peer is the protocol between the nodes of a cluster: a Client
// forwards calls to the node that owns their keys, over one long-lived
// connection that carries many calls at once, and a Server answers them
// from that node's Handler.
//
// # Handshake and sealing
//
// Each connection starts with a handshake (auth.go) in which both sides
// prove they hold the cluster's secret without sending it, agree on the
// highest protocol version both speak, and derive two AES-256-GCM keys (one
// per direction) with HKDF-SHA256 over the secret and both sides' fresh
// nonces. Every frame after it travels sealed in a record (wire.go) whose
// nonce is a counter: a record modified, replayed (from this connection or
// any other), dropped or reordered fails to open, the connection is closed,
// and the calls in flight on it fail as they would for a dead peer. So
// between holders of the secret the link is confidential (keys and rules
// are not on the wire in clear), has integrity (no decision is altered) and
// is replay-proof. With no secret the handshake proves nothing and frames
// travel in clear: that mode is for demos.
//
// # Bounds
//
// Against anyone who can reach the listener, the Server bounds what it
// spends: at most MaxHandshakes connections in the handshake and MaxConns
// authenticated ones (beyond either, a new connection is closed before
// anything is read; with ServerConfig.Member a quarter of the handshake
// slots is kept for the cluster's members, so that no flood from other
// addresses keeps them out), a deadline on the handshake and on the rest of
// every record once its first byte arrived, an idle timeout, and per
// connection at most MaxInFlight requests served at once and
// MaxInFlightBytes of records being read or served (a record counts from
// the moment its length is read, before its body). Refusals and failures
// are counted in Stats and logged as one line per kind and interval with a
// count. Buffers start at 4 KiB, grow as a record's bytes arrive (to at
// most twice what arrived: never to a length announced and not sent) and
// are dropped when a connection goes quiet.
//
// # Concurrency
//
// A Server serves the requests of one connection concurrently, up to
// MaxInFlight, so a slow request delays no other; answers go back as they
// are ready, matched to their calls by id. Client and Server are safe for
// simultaneous use by multiple goroutines.
//
// A Client's calls do their own reading and writing: a lone call writes
// its frame and reads its answer on its own goroutine, with no hand-off; with
// many in flight, one call at a time reads and hands each answer to its
// call, and a writer goroutine per connection writes what was queued,
// batched by opportunity (no timer, no waiting for answers). From version
// 3 what is written together is sealed together, in as few records as
// possible (wire.go).
//
// The package is internal: nothing outside the module has any use for the
// wire format.
package peer
