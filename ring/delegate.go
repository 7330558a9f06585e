package ring

import (
	"math/rand/v2"
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
	m.mu.Lock()
	switch _, leaving := m.leaving[n.Name]; {
	case alive:
		md, err := decodeMeta(n.Meta)
		if err != nil {
			m.log.Warn("ring: member metadata unreadable", "peer", n.Name, "err", err)
		}
		m.members[n.Name] = memberInfo{rpcAddr: md.RPCAddr}
		delete(m.failed, n.Name)
		delete(m.leaving, n.Name)
	case leaving || n.Name == m.cfg.Name: // left gracefully: not to be reconnected
		delete(m.members, n.Name)
		delete(m.failed, n.Name)
	default: // failed (memberlist's Node.State does not tell dead from left)
		delete(m.members, n.Name)
		m.failed[n.Name] = failedMember{addr: n.Address(), at: now}
		evictOldest(m.failed, func(f failedMember) time.Time { return f.at })
	}
	m.mu.Unlock()
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

// reconnectLoop periodically tries to re-join members declared failed, as
// Serf does: memberlist alone stops talking to them, so the two halves of a
// healed partition would stay apart until a late push/pull.
func (m *Membership) reconnectLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		if m.left.Load() {
			continue
		}
		for _, addr := range m.reconnectTargets(time.Now()) {
			select {
			case <-m.stop:
				return
			default:
			}
			// Bounded by TCPTimeout; a success brings the member back
			// through NotifyJoin, which forgets it.
			if _, err := m.ml.Join([]string{addr}); err != nil {
				m.log.Debug("ring: reconnect failed", "addr", addr, "err", err)
			} else {
				m.log.Info("ring: reconnected", "addr", addr)
			}
		}
	}
}

// reconnectTargets forgets the failed members older than ReconnectTimeout
// and the leave intents older than leaveIntentTTL, and returns the addresses of up to reconnectsPerRound of the others,
// chosen at random.
func (m *Membership) reconnectTargets(now time.Time) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, at := range m.leaving {
		if now.Sub(at) > leaveIntentTTL {
			delete(m.leaving, name)
		}
	}
	addrs := make([]string, 0, len(m.failed))
	for name, f := range m.failed {
		if now.Sub(f.at) > m.cfg.ReconnectTimeout {
			delete(m.failed, name)
			continue
		}
		addrs = append(addrs, f.addr)
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	return addrs[:min(len(addrs), reconnectsPerRound)]
}
