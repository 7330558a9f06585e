package ring

import (
	"math/rand/v2"
	"time"
)

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
		m.sum.Flush(false) // summaries of repeated lines whose interval is over
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
			delete(m.leftInc, name)
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
