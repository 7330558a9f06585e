package ring

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// A member that leaves gossips a leave intent before memberlist's own leave
// message, as Serf does. memberlist reports a member that left and one that
// failed alike (NotifyLeave; its Node.State is never set), and only failed
// members are to be reconnected. An intent may arrive before or after the
// member is dropped: either way it is not reconnected.

// msgLeaveIntent starts a leave-intent message; the member's name follows.
const msgLeaveIntent byte = 1

// leaveIntentTTL is how long a leave intent is remembered: long enough to
// outlast memberlist's own leave message, short enough that a late copy does
// not mark a member that came back since as leaving.
const leaveIntentTTL = 30 * time.Second

// leaveIntent is a leave intent queued for gossip. A newer intent for the
// same member replaces an older one.
type leaveIntent struct {
	name string
	msg  []byte
	done chan struct{} // closed when gossip is done with it; may be nil
}

var _ memberlist.NamedBroadcast = (*leaveIntent)(nil)

func newLeaveIntent(name string, done chan struct{}) *leaveIntent {
	return &leaveIntent{name: name, msg: append([]byte{msgLeaveIntent}, name...), done: done}
}

func (b *leaveIntent) Invalidates(o memberlist.Broadcast) bool {
	x, ok := o.(*leaveIntent)
	return ok && x.name == b.name
}
func (b *leaveIntent) Name() string    { return "leave:" + b.name }
func (b *leaveIntent) Message() []byte { return b.msg }
func (b *leaveIntent) Finished() {
	if b.done != nil {
		close(b.done)
	}
}

// announceLeave gossips this member's leave intent and waits until it has
// been sent as often as gossip sends anything, at most wait.
func (m *Membership) announceLeave(wait time.Duration) {
	if m.Ring().Len() <= 1 {
		return // nobody to tell
	}
	done := make(chan struct{})
	m.bcast.QueueBroadcast(newLeaveIntent(m.cfg.Name, done))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		m.log.Debug("ring: leave intent not fully gossiped", "wait", wait)
	}
}

// handleMsg handles a gossip message from another member. memberlist calls
// it from its packet handler: it must not block.
func (m *Membership) handleMsg(buf []byte) {
	if len(buf) < 2 || buf[0] != msgLeaveIntent {
		return
	}
	name := string(buf[1:])
	if name == m.cfg.Name {
		return
	}
	m.mu.Lock()
	_, seen := m.leaving[name]
	m.leaving[name] = time.Now()
	evictOldest(m.leaving, func(t time.Time) time.Time { return t })
	delete(m.failed, name)
	m.mu.Unlock()
	if !seen { // pass it on, so it reaches everyone
		m.bcast.QueueBroadcast(newLeaveIntent(name, nil))
	}
}
