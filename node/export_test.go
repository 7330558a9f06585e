package node

import "github.com/ringlimit/ringlimit/local"

// Crash stops n as a crash would: no hand-off and no Leave, the listeners
// gone, every goroutine stopped. Close after it does nothing. Only tests see
// it.
func Crash(n *Node) {
	n.closeOnce.Do(func() {
		n.closed.Store(true)
		n.members.Shutdown()
		n.server.Close()
		n.peers.closeAll()
		close(n.stop)
		n.wg.Wait()
		n.closeStore()
	})
}

// Install gives n key's state as a push from the member named from would:
// tests use it to put a state where the ring does not send the key.
func Install(n *Node, key string, st local.State, from string) {
	n.install(key, encodeState(st), from)
}

// Holds reports whether n's local store holds a state of key that still
// matters.
func Holds(n *Node, key string) bool { return n.local.Has(key) }
