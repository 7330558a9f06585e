package node

// Ready reports whether the node is ready for traffic: it is open, and it
// has joined a cluster (another member is on its ring) or was configured to
// be alone (no Join). Wire it to a readiness probe, so that a service
// instance gets traffic only once its limits are shared with the cluster.
//
// Provisional: branch node's Ready also waits for the initial pull of the
// keys the node owns.
func (n *Node) Ready() bool {
	if n.closed.Load() {
		return false
	}
	if len(n.cfg.Join) == 0 {
		return true
	}
	select {
	case <-n.ready:
		return true
	default:
		return false
	}
}
