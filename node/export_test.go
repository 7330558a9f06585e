package node

// Crash stops n as a crash would: no Leave, the peer listener gone. Only
// tests see it.
func Crash(n *Node) {
	n.closed.Store(true)
	n.members.Shutdown()
	n.server.Close()
	n.peers.closeAll()
}
