package ring

import (
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate gives memberlist this member's metadata and carries the leave
// intents (see leave.go).
type delegate struct {
	m    *Membership
	meta []byte
}

var _ memberlist.Delegate = (*delegate)(nil)

func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit { // validated against metaMaxSize; defensive
		return nil
	}
	return d.meta
}
func (d *delegate) NotifyMsg(buf []byte) { d.m.handleMsg(buf) }
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.m.bcast.GetBroadcasts(overhead, limit)
}
func (*delegate) LocalState(bool) []byte              { return nil }
func (*delegate) MergeRemoteState(buf []byte, _ bool) {}

// events is the Membership seen as memberlist's EventDelegate. memberlist
// calls it with its node lock held, one call at a time: it only records the
// change under m.mu (never held while calling memberlist) and wakes run.
type events Membership

var _ memberlist.EventDelegate = (*events)(nil)

func (e *events) NotifyJoin(n *memberlist.Node)   { e.record(n, true) }
func (e *events) NotifyUpdate(n *memberlist.Node) { e.record(n, true) }
func (e *events) NotifyLeave(n *memberlist.Node)  { e.record(n, false) }

func (e *events) record(n *memberlist.Node, alive bool) {
	m := (*Membership)(e)
	now := time.Now()
	cause := ""
	m.mu.Lock()
	_, known := m.members[n.Name]
	_, wasFailed := m.failed[n.Name]
	delete(m.refused, n.Name) // memberlist tells of it: its word is the latest
	var md meta
	if alive {
		var err error
		if md, err = decodeMeta(n.Meta); err != nil {
			m.sum.Warn("ring: member metadata unreadable", "ring: member metadata unreadable", "peer", n.Name, "err", err)
		}
	}
	switch _, leaving := m.leaving[n.Name]; {
	case alive && leaving && !known && md.Inc != 0 && md.Inc == m.leftInc[n.Name]:
		// The same run of a member that announced its leave, alive
		// again after its leave: memberlist does so when a refutation
		// the member made while leaving comes after its leave message
		// (beside six busy loops a survivor put a leaver back on its
		// ring for 0.8 s and handed it keys, whose states were lost). It
		// is gone; a restart has another incarnation.
	case alive:
		m.members[n.Name] = memberInfo{rpcAddr: resolveRPC(md.RPCAddr, n.Addr), inc: md.Inc, addr: n.Address()}
		delete(m.failed, n.Name)
		delete(m.leaving, n.Name)
		delete(m.leftInc, n.Name)
		m.unhold(n.Name) // it refuted while held
	case leaving || n.Name == m.cfg.Name: // left gracefully: not to be reconnected
		delete(m.members, n.Name)
		delete(m.failed, n.Name)
		m.unhold(n.Name)
		cause = "left"
	case known && m.holdFor() > 0: // failed, but this member runs late: see Config.Stalled
		m.hold(n.Name, n.Address(), m.holdFor())
	default: // failed (memberlist's Node.State does not tell dead from left)
		delete(m.members, n.Name)
		m.failed[n.Name] = failedMember{addr: n.Address(), at: now}
		evictOldest(m.failed, func(f failedMember) time.Time { return f.at })
		cause = "failed"
	}
	m.mu.Unlock()
	// Every drop of a member this one knew, once, with its cause, and every
	// return of a member dropped as failed: gossip can bring news of a
	// member alive after it was declared failed (a refutation still on its
	// way), and the member is then dropped, and logged, again.
	switch {
	case alive && !known && wasFailed:
		m.log.Info("ring: member back", "peer", n.Name, "addr", n.Address(), "cause",
			"back: gossip holds it alive again after it was declared failed (it refuted, restarted, or news of it alive came late)")
	case !known || n.Name == m.cfg.Name:
	case cause == "failed":
		m.log.Warn("ring: member dropped", "peer", n.Name, "addr", n.Address(), "cause",
			"failed: it did not answer probes, direct or indirect, nor refute the suspicion in time")
	case cause == "left":
		m.log.Info("ring: member dropped", "peer", n.Name, "addr", n.Address(), "cause", "left: it announced its leave")
	}
	m.notify()
}

// evictOldest deletes the oldest entries of a map beyond maxRemembered.
func evictOldest[V any](mp map[string]V, at func(V) time.Time) {
	for len(mp) > maxRemembered {
		var oldest string
		var t time.Time
		for k, v := range mp {
			if oldest == "" || at(v).Before(t) {
				oldest, t = k, at(v)
			}
		}
		delete(mp, oldest)
	}
}

// resolveRPC fills in a published RPC address whose host is empty or
// unspecified with the host the member gossips from.
func resolveRPC(addr string, gossipHost net.IP) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil || gossipHost == nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort(gossipHost.String(), p)
	}
	return addr
}
