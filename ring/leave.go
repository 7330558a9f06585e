package ring

import (
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// A member that leaves gossips a leave intent before memberlist's own leave
// message, as Serf does. memberlist reports a member that left and one that
// failed alike (NotifyLeave; its Node.State is never set), and only failed
// members are to be reconnected. An intent may arrive before or after the
// member is dropped: either way it is not reconnected.

// A leave intent is one of two messages: msgLeaveIntent followed by the
// member's name (what releases before this one send and understand), and
// msgLeaveIntentRun followed by the member's incarnation (8 bytes, little
// endian) and its name. A leaver sends the second straight to every member
// and gossips both; only the second says which run left, so only it makes
// a member Leaving, and a late copy of it (gossip relays it for a while)
// names an earlier run once the member has restarted, and is ignored.
const (
	msgLeaveIntent    byte = 1
	msgLeaveIntentRun byte = 2
)

// leaveIntentTTL is how long a leave intent is remembered: long enough to
// outlast memberlist's own leave message, short enough that a late copy does
// not mark a member that came back since as leaving.
const leaveIntentTTL = 30 * time.Second

// leaveIntent is a leave intent queued for gossip. A newer intent of the
// same kind for the same member replaces an older one.
type leaveIntent struct {
	name string
	msg  []byte
	done chan struct{} // closed when gossip is done with it; may be nil
}

var _ memberlist.NamedBroadcast = (*leaveIntent)(nil)

// newLeaveIntent returns name's intent without its run (inc 0), or with it.
func newLeaveIntent(name string, inc uint64, done chan struct{}) *leaveIntent {
	msg := append([]byte{msgLeaveIntent}, name...)
	if inc != 0 {
		msg = binary.LittleEndian.AppendUint64([]byte{msgLeaveIntentRun}, inc)
		msg = append(msg, name...)
	}
	return &leaveIntent{name: name, msg: msg, done: done}
}

// parseLeaveIntent returns the member a leave intent names, and its run (0
// if the intent does not say); ok is false for any other message.
func parseLeaveIntent(buf []byte) (name string, inc uint64, ok bool) {
	switch {
	case len(buf) >= 2 && buf[0] == msgLeaveIntent:
		return string(buf[1:]), 0, true
	case len(buf) >= 10 && buf[0] == msgLeaveIntentRun:
		inc = binary.LittleEndian.Uint64(buf[1:9])
		return string(buf[9:]), inc, inc != 0
	}
	return "", 0, false
}

func (b *leaveIntent) Invalidates(o memberlist.Broadcast) bool {
	x, ok := o.(*leaveIntent)
	return ok && x.name == b.name && x.msg[0] == b.msg[0]
}
func (b *leaveIntent) Name() string    { return "leave" + strconv.Itoa(int(b.msg[0])) + ":" + b.name }
func (b *leaveIntent) Message() []byte { return b.msg }
func (b *leaveIntent) Finished() {
	if b.done != nil {
		close(b.done)
	}
}

// announceLeave tells the others that this member leaves, and waits until
// they have been told, at most wait. Gossip alone reaches members in no
// order: a member it reached only through a relay could get memberlist's
// own leave message first and take the leave for a failure. So the intent
// also goes straight to every live member, over a stream of its own, before
// memberlist's leave message is made; gossip carries it on to any member a
// stream did not reach.
func (m *Membership) announceLeave(wait time.Duration) {
	if m.Ring().Len() <= 1 {
		return // nobody to tell
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	done := make(chan struct{})
	inc := m.cfg.Incarnation
	intent := newLeaveIntent(m.cfg.Name, inc, done)
	gossip := func() {
		m.bcast.QueueBroadcast(intent)
		if inc != 0 { // and for members of earlier releases
			m.bcast.QueueBroadcast(newLeaveIntent(m.cfg.Name, 0, nil))
		}
	}
	select {
	case <-m.tellLeaving(intent.msg):
	case <-t.C:
		m.log.Debug("ring: leave intent not sent to every member", "wait", wait)
		gossip()
		return
	}
	gossip()
	select {
	case <-done:
	case <-t.C:
		m.log.Debug("ring: leave intent not fully gossiped", "wait", wait)
	}
}

// maxLeaveStreams bounds the streams that carry a leave intent at once.
const maxLeaveStreams = 16

// tellLeaving sends msg to every other live member over a stream of its
// own, maxLeaveStreams at a time, and returns a channel closed when every
// send has ended. A send to an unreachable member ends after TCPTimeout,
// and Shutdown waits for it.
func (m *Membership) tellLeaving(msg []byte) <-chan struct{} {
	var to []*memberlist.Node
	m.mu.Lock()
	for name, info := range m.members {
		host, port, err := net.SplitHostPort(info.addr)
		p, perr := strconv.ParseUint(port, 10, 16)
		if name == m.cfg.Name || err != nil || perr != nil {
			continue
		}
		to = append(to, &memberlist.Node{Name: name, Addr: net.ParseIP(host), Port: uint16(p)})
	}
	m.mu.Unlock()
	ended := make(chan struct{})
	var next atomic.Int64
	var sends sync.WaitGroup
	for range min(len(to), maxLeaveStreams) {
		sends.Add(1)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer sends.Done()
			for i := next.Add(1) - 1; i < int64(len(to)); i = next.Add(1) - 1 {
				if err := m.sendLeave(to[i], msg); err != nil {
					m.log.Debug("ring: leave intent not sent", "peer", to[i].Name, "err", err)
				}
			}
		}()
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		sends.Wait()
		close(ended)
	}()
	return ended
}

// Leaving reports whether the member named name, still a member, announced
// its leave in this run (its incarnation is the one it had then, which it
// returns), within leaveIntentTTL. A member announces its leave once its
// keys' states have gone to their next owners: a call that member no longer
// answers belongs with them, not with the store.
func (m *Membership) Leaving(name string) (inc uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, leaving := m.leaving[name]
	info, known := m.members[name]
	if !leaving || !known || info.inc == 0 || info.inc != m.leftInc[name] || time.Since(at) > leaveIntentTTL {
		return 0, false
	}
	return info.inc, true
}

// handleMsg handles a gossip message from another member. memberlist calls
// it from its packet handler: it must not block.
func (m *Membership) handleMsg(buf []byte) {
	name, inc, ok := parseLeaveIntent(buf)
	if !ok || name == m.cfg.Name {
		return
	}
	m.mu.Lock()
	if info, known := m.members[name]; known && inc != 0 && info.inc != 0 && info.inc != inc {
		m.mu.Unlock()
		return // a late copy of an earlier run's intent: this run did not leave
	}
	_, seen := m.leaving[name]
	if inc != 0 {
		seen = seen && m.leftInc[name] == inc
		m.leftInc[name] = inc
	}
	_, failed := m.failed[name]
	m.leaving[name] = time.Now()
	evictOldest(m.leaving, func(t time.Time) time.Time { return t })
	for n := range m.leftInc {
		if _, ok := m.leaving[n]; !ok {
			delete(m.leftInc, n) // evicted with its intent
		}
	}
	delete(m.failed, name)
	m.mu.Unlock()
	if failed {
		// Gossip reaches members in no order: memberlist's own leave
		// message came first, and the drop was logged as a failure.
		m.log.Info("ring: member left after all", "peer", name, "cause",
			"left: its leave intent came after it was dropped as failed; it is not reconnected")
	}
	if !seen { // pass it on, so it reaches everyone
		m.bcast.QueueBroadcast(newLeaveIntent(name, inc, nil))
	}
}
