package hold

import "github.com/ringlimit/ringlimit"

func (c *Core) setMark(key string, m *mark) {
	if m.inc == 0 && c.view != nil {
		m.inc = incOf(c.view, m.to)
	}
	if _, ok := c.marks[key]; !ok && len(c.marks) >= c.maxMarks {
		c.dropMark()
	}
	c.marks[key] = m
}

// dropMark makes room for a mark: the one without a copy that expires first
// goes (counted in MarksDropped). A mark with a copy holds a state, and is
// kept: there are at most as many as the states this node gave away and
// that were not confirmed yet.
func (c *Core) dropMark() {
	var victim string
	var until int64
	for k, m := range c.marks {
		if m.copy == nil && (victim == "" || m.until < until) {
			victim, until = k, m.until
		}
	}
	if victim != "" {
		delete(c.marks, victim)
		c.MarksDropped++
	}
}

// Gave records that key's state (version ver, expiring at until) left this
// node for the member to, in a push or in a pull's answer: copy is the
// state sent, kept until Confirmed (an answer lost on the way is not a
// state lost: the member's next pull gets the copy).
func (c *Core) Gave(key, to string, ver Version, copy *ringlimit.State, until int64) {
	c.setMark(key, &mark{to: to, ver: ver, copy: copy, until: until, pushed: true})
}

// GaveInAnswer is Gave for a state that left in the answer to a pull of to
// (Reply.Give): to installs it and confirms, or gives up on this node and
// says so (Dropped).
func (c *Core) GaveInAnswer(key, to string, ver Version, copy *ringlimit.State, until int64) {
	c.setMark(key, &mark{to: to, ver: ver, copy: copy, until: until, served: true})
}

// Dropped records that the member asker gave up its pull of key from this
// node (no answer reached it in time): a state this node gave it in an
// answer, which it did not install, comes back. It returns the copy to
// install, if the mark still holds one for asker and no push of it is on
// its way.
func (c *Core) Dropped(key, asker string) (*ringlimit.State, Version, bool) {
	c.arrivals++
	m := c.marks[key]
	if m == nil || m.to != asker || m.copy == nil || m.pushed {
		return nil, Version{}, false
	}
	delete(c.marks, key)
	return m.copy, m.ver, true
}

// Pending returns the copy this node keeps of key's state for a push to
// the member to that is not confirmed yet: what a retry of the push may
// send. false if there is none (confirmed, taken back, or given on).
func (c *Core) Pending(key, to string) (*ringlimit.State, Version, bool) {
	m := c.marks[key]
	if m == nil || m.to != to || m.copy == nil {
		return nil, Version{}, false
	}
	return m.copy, m.ver, true
}

// MarkInc is the incarnation of the member key's state was given to, as
// this node knew it then (0: unknown): a push of it is meant for that
// incarnation only (Arrival.Inc).
func (c *Core) MarkInc(key string) uint64 {
	if m := c.marks[key]; m != nil {
		return m.inc
	}
	return 0
}

// HasCopy reports whether this node keeps a copy of key's state for a
// member it gave it to (not confirmed yet).
func (c *Core) HasCopy(key string) bool {
	m := c.marks[key]
	return m != nil && m.copy != nil
}

// Unconfirmed is the number of states this node gave away (in a push or
// in a pull's answer) whose taker has not confirmed them yet: it keeps a
// copy of each, which is the state until then. A leaving node leaves the
// membership only once none is left (or after its bound): its peers can
// no longer ask it then, and a copy still here would be lost with it
// while its taker, given up on asking, starts the key from the store.
//
// It visits every mark: a leaver's Close calls it, not a call.
func (c *Core) Unconfirmed() int {
	n := 0
	for _, m := range c.marks {
		if m.copy != nil {
			n++
		}
	}
	return n
}

// Confirmed records that the member to installed the state given to it
// (pushed, or in a pull's answer) with the version ver. A confirm of an
// earlier hand-over of the key to the same member (late: the state came
// back and went there again since) confirms nothing: its copy is the
// state until the later one is confirmed or taken back. (A pull's confirm,
// late, once cleared the copy of a push that was then refused: the state
// was lost, and the key started again from the store, stress seed 5157.)
// The zero ver is a confirm that does not say (from a node of the release
// before): it confirms only a state given in an answer.
func (c *Core) Confirmed(key, to string, ver Version) {
	m := c.marks[key]
	if m == nil {
		return
	}
	if c.bugs&bugConfirmAnyone == 0 && (m.to != to || ver == (Version{}) && !m.served || ver != (Version{}) && ver != m.ver) {
		return
	}
	m.copy = nil
}

// TakeBack undoes a push that could not be delivered: it returns the copy
// to import again, if the mark still holds it (a pull did not take it).
// A pull of the key on its way ends: the state is here again (the shell
// decides the calls that waited for it).
func (c *Core) TakeBack(key, to string) (*ringlimit.State, Version, bool) {
	c.arrivals++
	m := c.marks[key]
	if m == nil || m.to != to || m.copy == nil || m.served {
		// (A copy served in a pull's answer may be installed at to even
		// though to refused the push: it stays given.)
		return nil, Version{}, false
	}
	delete(c.marks, key)
	delete(c.pulls, key)
	return m.copy, m.ver, true
}

// Arrival is a state that arrived in a push.
type Arrival struct {
	Key  string
	Hash uint64
	From string
	Inc  uint64 // the incarnation of this node the push was meant for (0: any)
	Ver  Version
	Has  bool    // a state is here already
	Held Version // its version, if Has
	Now  int64
}

// Arrived says whether a pushed state is installed, and if so where it goes
// on: "" (it stays: this node owns the key) or the member to push it to.
// Installing over a state that is here means merging the two (local.Merge):
// they were started apart.
// A node that leaves refuses every state (refused): its sender keeps it
// (TakeBack), since what arrives now could stay behind.
func (c *Core) Arrived(a Arrival) (install bool, on string, refused bool) {
	c.arrivals++
	if a.Inc != 0 && a.Inc != c.Inc && c.bugs&bugPushAcrossInc == 0 {
		// Meant for an earlier incarnation of this node, which is gone:
		// the sender keeps it (it may have taken its copy back already).
		return false, "", true
	}
	// A copy of a state that arrived here before (a retried push whose
	// answer was lost) is acknowledged, not refused: its sender must not
	// take back what this node installed.
	if a.Has && a.Held.Covers(a.Ver) {
		return false, "", false // a copy of one installed already
	}
	m := c.liveMark(a.Key, a.Now)
	if m != nil && m.to != c.self && m.ver.Descends(a.Ver) {
		return false, "", false // a late copy of one this node has passed on since
	}
	if c.leaving != nil {
		// Refused: the state stays with its sender, and pulls and calls
		// that reach this node for the key go there.
		c.setMark(a.Key, &mark{to: a.From, until: a.Now + c.MaxUntil})
		return false, "", true
	}
	delete(c.marks, a.Key)
	delete(c.pulls, a.Key) // a pull on its way ends here: the state came
	if m != nil && m.ver.Epoch == 0 && m.to != c.self && m.to != a.From && m.copy == nil {
		// This node told m.to it holds nothing (or that m.to takes the key):
		// m.to holds the key since, and this late state goes on to it
		// (where the two merge). Kept here, it would be decided in two
		// places.
		return true, m.to, false
	}
	if o := c.Owner(a.Hash); o != c.self && o != a.From {
		return true, o, false
	}
	// Owned here, or owned by its sender in this node's view: the sender
	// gave it here on its own view (it leaves, or its ring is newer), and
	// its mark sends the key's calls here. It is never pushed back.
	return true, "", false
}

// Tick lets the core drop what has expired at now.
//
// It visits every mark: call it now and then (every second, say), not per
// call.
func (c *Core) Tick(now int64) {
	c.expire(now)
	for k, m := range c.marks {
		if m.until <= now {
			delete(c.marks, k)
		}
	}
}

// Done is a member's word that it holds no state for the keys this node
// owns in the view viewID, and expects none (it is Clean). It resolves the
// sources that name it, and reports whether this node became Clean by it
// (the shell then sends its own Done, once its push is confirmed).
//
// A Done of this node's own view speaks for every source even when the
// view's own source is resolved already (by the other members' Done, which
// came first): all of them came with that view or before it. (Dropped, it
// left the older sources that name the sender open for good: a member
// that is not Clean says no Done, so after a rolling restart every member
// but the last restarted kept 2 to 5 changes open.)
//
// known is false for another view this node has no source of (not seen
// yet, or resolved already): the sender may say it again later.
func (c *Core) Done(from string, viewID uint64) (becameClean, known bool) {
	last := -1
	for i, s := range c.srcs {
		if s.view == viewID {
			last = i
		}
	}
	if last < 0 && viewID == c.viewID && c.bugs&bugDoneLost == 0 {
		last = len(c.srcs) - 1
	}
	if last < 0 {
		return false, false
	}
	kept := c.srcs[:0]
	for i, s := range c.srcs {
		if i <= last && s.prev.Contains(from) {
			// A Done of a view speaks for the sources up to that view's:
			// the sender held nothing of this node's keys then and knew of
			// nobody who might. It says nothing of later changes, nor of a
			// change it was no member before (the map of those who said
			// Done holds members only).
			s.done[from] = true
		}
		if !c.resolved(s) {
			kept = append(kept, s)
		} else {
			c.Resolved++
		}
	}
	clear(c.srcs[len(kept):])
	c.srcs = kept
	return c.Clean(), true
}

// resolved reports whether every other member of s.prev has resolved s.
// A member that left cannot: its keys are pulled from it (or loaded from
// the store) one by one until the source expires.
func (c *Core) resolved(s *source) bool {
	for _, o := range s.prev.Members() {
		if o != c.self && !s.done[o] {
			return false
		}
	}
	return true
}

// Clean reports whether this node may say Done: no pull on its way, and no
// unresolved source but the current view's. The current view's source
// stands for the keys this node gained in it, which no other member owns in
// that view, so it does not hold back the word that this node holds nothing
// of theirs; an older one may (a key this node gained and never pulled may
// have moved on to another member since, and its state is still where the
// older source says: a pull of it from this node is sent there).
func (c *Core) Clean() bool {
	if len(c.pulls) > 0 {
		return false
	}
	switch len(c.srcs) {
	case 0:
		return true
	case 1:
		return c.srcs[0].view == c.viewID
	}
	return false
}

// Settled reports whether this node expects no state from another member:
// no unresolved source and no pull on its way.
func (c *Core) Settled() bool { return len(c.srcs) == 0 && len(c.pulls) == 0 }

// Changing reports whether a key may still change hands here: a pull on
// its way, the node leaving, or a ring change that a member of this
// node's view has not resolved yet. (A change whose unresolved members
// have all left the view waits for its expiry: their keys are pulled one by
// one, and loaded from the store, but nothing is on its way.)
func (c *Core) Changing() bool { return c.ChangingSince(0) }

// ChangingSince is Changing, counting only the ring changes seen after the
// instant after (ms): a shell that reports whether keys change hands may
// stop waiting for a change some member never resolves (its Done was lost,
// or came before this node saw the change) after a while; the change
// itself stays until it expires.
func (c *Core) ChangingSince(after int64) bool {
	if len(c.pulls) > 0 || c.leaving != nil {
		return true
	}
	for _, s := range c.srcs {
		if s.at <= after {
			continue
		}
		for _, m := range s.prev.Members() {
			if m != c.self && !s.done[m] && c.inView(m) {
				return true
			}
		}
	}
	return false
}

// Settling: a ring change whose members wait on each other's Done.
//
// A member says Done only once it is Clean, and it is Clean only once its
// older changes are resolved by the others' Done: when views change faster
// than a round of Done (a join right after a join, a rolling restart), every
// member can end up waiting on another, and the changes stay open until
// they expire. Done is more than is needed here: it says that the sender
// expects nothing from anyone. What a change waits for is that no state of
// the keys it moved is held, or on its way, anywhere among its members.
//
// Settle resolves the changes by asking exactly that, of every member of
// the view, twice. The shell of a node that is Idle (and whose pushes are
// all confirmed) asks every other member of its view for its word: Idle in
// the same view, pushes confirmed, and its Arrivals count. Once every
// member has said so, it asks them all again (the second round starts only
// after every answer of the first came); if every member is still Idle in
// that view and no member's Arrivals changed, including its own, the shell
// calls Settle. Why that is enough:
//
//   - At its first word, no member holds the state of a key another member
//     owns (its pushes are confirmed, and it answers no pull with one it
//     has not been confirmed), and nothing it sent is on its way.
//   - Suppose a state arrives at some member after its first word; take
//     the earliest such arrival, at Y from Z. If Z sent it before its own
//     first word, Z's pushes were confirmed by then, so it reached Y before
//     Z's first word, which came before Y's second: Y's count changed
//     between its words. If Z sent it after its first word, Z held it
//     after that word and not at it, so it arrived at Z after Z's first
//     word: an earlier such arrival. Either way a count changed, or the
//     arrival is not the earliest: so with no count changed, no state
//     arrived anywhere after a first word, and none will (the same argument,
//     for an arrival after a second word).
//   - So no member holds, or will receive, a state of a key it does not own
//     in the view: every change's question of its live members is answered.
//
// It takes every member of the view being Idle: a change that waits on a
// member the view no longer has, or has under another incarnation, is not
// settled this way (that member may still hold what it held), and its
// members are not Idle.

// Arrivals counts the events that may have brought a state to this node:
// pushes that arrived, pulls' answers, loads, states taken back or coming
// back from an asker that gave up. (It counts events, not states: an
// event that brought nothing still counts, which only makes Settle wait.)
func (c *Core) Arrivals() uint64 { return c.arrivals }

// Idle reports whether this node has nothing on its way and holds nothing
// for the others, as far as the core knows: no pull on its way, not
// leaving, no state given away unconfirmed, and every ring change still
// open waits only on members that the view has, under the incarnation the
// change saw. The shell adds its own part: every push confirmed.
//
// It visits every mark: the shell asks it when a member asks, not per call.
func (c *Core) Idle() bool {
	if len(c.pulls) > 0 || c.leaving != nil || c.view == nil || c.Unconfirmed() > 0 {
		return false
	}
	for _, s := range c.srcs {
		for _, m := range s.prev.Members() {
			if m == c.self || s.done[m] {
				continue
			}
			if !c.inView(m) {
				return false
			}
		}
	}
	return true
}

// Settle resolves every open ring change, once the shell has found every
// member of the view viewID Idle twice with no arrival between (see above).
// It reports whether this node became Clean by it (the shell then says
// Done). A view that is not the current one, or a node that is not Idle,
// settles nothing.
func (c *Core) Settle(viewID uint64) (becameClean bool) {
	if viewID != c.viewID || !c.Idle() || len(c.srcs) == 0 {
		return false
	}
	for _, s := range c.srcs {
		for _, m := range s.prev.Members() {
			if m != c.self && c.inView(m) {
				s.done[m] = true
			}
		}
	}
	kept := c.srcs[:0]
	for _, s := range c.srcs {
		if !c.resolved(s) {
			kept = append(kept, s)
		} else {
			c.Resolved++
			c.Settles++
		}
	}
	clear(c.srcs[len(kept):])
	c.srcs = kept
	return c.Clean()
}
