package node

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
