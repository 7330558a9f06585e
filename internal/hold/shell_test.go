package hold

// The node shell of the simulator: what node does with the core's actions,
// on the simulated network and store.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/memstore"
	"github.com/ringlimit/ringlimit/ring"
)

// again runs the calls parked on key at n through the core once more.
func (s *sim) again(n *snode, key string) {
	ws := n.waiting[key]
	delete(n.waiting, key)
	for _, c := range ws {
		fin, moved := s.parked[c], s.parkedMoved[c]
		if fin == nil {
			s.route(n, c, "")
			continue
		}
		a := n.core.Call(Call{Key: key, Hash: ring.Hash(key), Has: n.lim.Has(key), Forwarded: true, Now: s.nodeNow(n)})
		switch a.Kind {
		case Decide:
			delete(s.parked, c)
			delete(s.parkedMoved, c)
			fin(s.decide(n, c))
		case Moved:
			delete(s.parked, c)
			delete(s.parkedMoved, c)
			moved(a.To)
		default:
			n.waiting[key] = append(n.waiting[key], c)
			if a.Kind == Pull {
				s.pull(n, key, a.To, a.Inc)
			} else if a.Kind == Load {
				s.load(n, key, a.Cleared)
			}
		}
	}
}

// pushAll pushes every state whose key another member owns in n's view
// (or in the ring without n, while it leaves), then Done.
func (s *sim) pushAll(n *snode) {
	byTo := map[string][]string{}
	n.lim.Range(func(key string, _ memstore.State) bool {
		if o := n.core.Owner(ring.Hash(key)); o != n.name && o != "" {
			byTo[o] = append(byTo[o], key)
		}
		return true
	})
	for _, to := range sortedKeys(byTo) {
		var items []pushed
		for _, key := range slices.Sorted(slices.Values(byTo[to])) { // (the store's order is not the seed's)
			if it, ok := s.give(n, key, to); ok {
				items = append(items, it)
			}
		}
		if len(items) > 0 {
			s.push(n, to, items, 0)
		}
	}
	s.maybeDone(n)
}

type pushed struct {
	key string
	st  ringlimit.State
	ver Version
	inc uint64 // the incarnation it is meant for
}

func (s *sim) push(n *snode, to string, items []pushed, try int) {
	n.pushes++
	inc := n.inc
	s.logf("%s pushes %d to %s", n.name, len(items), to)
	s.rpc(n.name, to, 150*ms, func(reply func(func())) {
		t := s.nodes[to]
		var refused []pushed
		for _, it := range items {
			if !s.arrive(t, n.name, it) {
				refused = append(refused, it)
			}
		}
		leaving, tinc := t.core.Leaving(), t.inc
		reply(func() {
			n.pushes--
			if leaving && len(refused) > 0 {
				s.leaves(n, to, tinc)
			}
			for _, it := range items {
				if !slices.ContainsFunc(refused, func(r pushed) bool { return r.key == it.key }) {
					n.core.Confirmed(it.key, to, it.ver)
				}
			}
			for _, it := range refused {
				// Refused (it leaves): take it back, and on to its owner
				// by the next push (node's push loop visits it as a stray).
				if st, ver, ok := n.core.TakeBack(it.key, to); ok {
					if !n.lim.Has(it.key) {
						n.lim.ImportChanged(it.key, *st) // (node's take-back installs: installLocked)
						n.vers[it.key] = ver
						n.leases.arrived[it.key] = s.now
					}
					s.release(n, it.key, false)
					key := it.key
					s.at(s.now+s.rnd(100*us, 10*ms), func() {
						s.deliver(n.name, inc, func() { s.pushStray(n, key) })
					})
				}
			}
			s.maybeDone(n)
		})
	}, func() {
		if n.inc != inc {
			return
		}
		n.pushes--
		if try < 3 && slices.Contains(s.members, to) {
			// Again, with what the marks still hold for to: a copy that
			// came back here meanwhile is not sent.
			var again []pushed
			for _, it := range items {
				if st, ver, ok := n.core.Pending(it.key, to); ok {
					again = append(again, pushed{it.key, *st, ver, it.inc})
				}
			}
			if len(again) > 0 {
				s.push(n, to, again, try+1)
			}
			return
		}
		// Undeliverable: the marks keep the copies (the target, or its
		// next owner, pulls them); the store gets them too, for a crash.
		n.pushFail = true
		for _, it := range items {
			if st, ver, ok := n.core.Pending(it.key, to); ok {
				s.storeWrite(it.key, *st, ver)
			}
		}
	})
}

// arrive installs a pushed state at t; false if t refused it.
func (s *sim) arrive(t *snode, from string, it pushed) bool {
	h := ring.Hash(it.key)
	held := s.held(t, it.key)
	install, on, refused := t.core.Arrived(Arrival{Key: it.key, Hash: h, From: from, Inc: it.inc, Ver: it.ver, Has: held != nil, Held: ptrOr(held), Now: s.nodeNow(t)})
	s.logf("%s arrived %s from %s ver %v: install=%v on=%q refused=%v", t.name, it.key, from, it.ver, install, on, refused)
	if refused {
		return false
	}
	if !install {
		return true
	}
	s.install(t, it.key, it.st, it.ver)
	if on != "" {
		// It goes on to on, and the calls waiting here go after it.
		s.pushTo(t, it.key, on)
		s.redirect(t, it.key, on)
		return true
	}
	s.release(t, it.key, false)
	return true
}

// maybeDone sends Done to every member once n's push is confirmed and it
// expects nothing more.
func (s *sim) maybeDone(n *snode) {
	if n.pushes > 0 || n.pushFail || !n.core.Clean() || n.core.Leaving() {
		return
	}
	id := n.core.ViewID()
	if n.sentDone == id {
		return
	}
	n.sentDone = id
	for _, m := range n.view {
		if m != n.name {
			s.sendDone(n, m, id, 0)
		}
	}
}

// sendDone sends n's Done for the view id to the member to; one that has
// not seen the view yet keeps none, and hears it again a moment later while
// n's view is still id (as node's retryDone does).
func (s *sim) sendDone(n *snode, to string, id uint64, tries int) {
	inc := n.inc
	s.send(n.name, to, func() {
		t := s.nodes[to]
		clean, known := t.core.Done(n.name, id)
		if clean {
			s.maybeDone(t)
		}
		if !known && t.core.ViewID() != id && tries < 20 {
			s.at(s.now+s.rnd(20*ms, 100*ms), func() {
				if n.inc == inc && n.alive && n.core.ViewID() == id && !n.core.Leaving() && n.core.Clean() {
					s.sendDone(n, to, id, tries+1)
				}
			})
		}
	})
}

func (s *sim) issue(origin, key string) {
	n := s.nodes[origin]
	if n == nil || !n.alive || n.core.Leaving() {
		return
	}
	s.seq++
	c := &scall{id: s.seq, key: key, origin: origin, inc: n.inc, issued: s.now}
	s.calls = append(s.calls, c)
	s.deliver(origin, n.inc, func() { s.route(n, c, "") })
}

// route runs a call made on n.
func (s *sim) route(n *snode, c *scall, via string) {
	if c.done || c.dropped {
		return
	}
	h, has := ring.Hash(c.key), n.lim.Has(c.key)
	if via == "" && !has && s.fromLease(n, c) {
		return
	}
	peekTo, peekOK := n.core.Peek(c.key, h)
	a := n.core.Call(Call{Key: c.key, Hash: h, Has: has, Via: via, Now: s.nodeNow(n)})
	s.logf("%s call %d %s via %q: %s %s", n.name, c.id, c.key, via, a.Kind, a.To)
	if peekOK && via == "" && !has && !(peekTo == "" && a.Kind == Decide || peekTo != "" && a.Kind == Forward && a.To == peekTo) {
		// node acts on Peek under a read lock: it must say what Call says.
		panic(fmt.Sprintf("%s: Peek(%s) said %q, Call said %s %s", n.name, c.key, peekTo, a.Kind, a.To))
	}
	switch a.Kind {
	case Decide:
		s.finish(c, s.decide(n, c))
	case Forward:
		s.forward(n, c, a.To, "")
		s.askLease(n, c.key, a.To)
	case Pull, Wait:
		n.waiting[c.key] = append(n.waiting[c.key], c)
		if a.Kind == Pull {
			s.pull(n, c.key, a.To, a.Inc)
		}
	case Load:
		n.waiting[c.key] = append(n.waiting[c.key], c)
		s.load(n, c.key, a.Cleared)
	default:
		panic("route: " + a.Kind.String())
	}
}

// held is the version of key's state at n, nil if it holds none.
func (s *sim) held(n *snode, key string) *Version {
	if !n.lim.Has(key) {
		return nil
	}
	v := n.vers[key]
	return &v
}

func ptrOr(v *Version) Version {
	if v == nil {
		return Version{}
	}
	return *v
}

// install puts st (version ver) in n's store, merged with the state there
// if there is one (they were started apart: the core checked).
func (s *sim) install(n *snode, key string, st ringlimit.State, ver Version) {
	if cur, ok := n.lim.Take(key); ok {
		s.logf("%s merges %s: %v + %v", n.name, key, n.vers[key].Origins, ver.Origins)
		st = memstore.Merge(cur, st)
		ver = Join(n.vers[key], ver)
	}
	n.lim.ImportChanged(key, st) // (written behind next: node's installLocked)
	n.vers[key] = ver
	n.leases.arrived[key] = s.now
}

func (s *sim) decide(n *snode, c *scall) ringlimit.Decision {
	s.logf("%s decides call %d (%s) from %s", n.name, c.id, c.key, c.origin)
	if d, ok := n.served[c.id]; ok {
		return d // a retried forward: decided once
	}
	d, err := n.lim.AllowNAt(time.UnixMilli(s.nodeNow(n)), c.key, s.rules[c.key], 1)
	if err != nil {
		panic(err)
	}
	n.served[c.id] = d
	if !d.Allowed {
		id := deniedAt{n.name, n.inc, c.key}
		s.denials[id] = append(s.denials[id], s.now)
	}
	if !d.Allowed && len(n.leases.lent[c.key]) > 0 && s.cfg.bugs&bugSkipRecall == 0 {
		s.recall(n, c.key)
	}
	if d.Allowed {
		s.admitted[c.key]++
		if s.deadWhileFaulted(n) {
			// Declared dead by a member while it was paused or cut off,
			// and deciding again: the episode the bound allows for (time-
			// bounded authority would make it none: docs/holder-authority.md).
			s.credit(c.key, n.name)
		}
		s.replayAdmit(c.key, s.nodeNow(n), n.name)
		if n.vers[c.key].Epoch == 0 {
			n.vers[c.key] = Fresh(s.nodeNow(n), s.rng.Uint64()|1) // a fresh start here
		}
		s.logf("%s admits %s (#%d, call %d)", n.name, c.key, s.admitted[c.key], c.id)
	}
	return d
}

// deadWhileFaulted reports whether a live member's view has dropped n (a
// false death: n has not left) while n was paused or cut off lately.
func (s *sim) deadWhileFaulted(n *snode) bool {
	if _, left := s.announced[n.name]; left || n.core.Leaving() {
		return false
	}
	dropped := false
	for _, m := range s.nodes {
		if m != n && m.alive && m.joined && !slices.Contains(m.view, n.name) {
			dropped = true
			break
		}
	}
	if !dropped {
		return false
	}
	since := s.now - 1000*ms
	if s.pausedIn(n, since, s.now) > 0 {
		return true
	}
	for k, l := range s.links {
		if (k[0] == n.name || k[1] == n.name) && l.cutUntil > since {
			return true
		}
	}
	return false
}

func (s *sim) finish(c *scall, d ringlimit.Decision) {
	if c.done {
		return
	}
	c.done, c.answered = true, s.now
}

// forward sends c to the member to; via is the member that said it moved
// there.
func (s *sim) forward(n *snode, c *scall, to, via string) {
	inc := n.inc
	s.rpc(n.name, to, 100*ms, func(reply func(func())) {
		t := s.nodes[to]
		a := t.core.Call(Call{Key: c.key, Hash: ring.Hash(c.key), Has: t.lim.Has(c.key), Forwarded: true, Via: via, Now: s.nodeNow(t)})
		s.logf("%s fwd call %d %s from %s via %q: %s %s", t.name, c.id, c.key, n.name, via, a.Kind, a.To)
		switch a.Kind {
		case Decide:
			d := s.decide(t, c)
			reply(func() { s.finish(c, d) })
		case Moved:
			reply(func() { s.moved(n, c, to, a.To) })
		case Pull, Wait, Load:
			// The owner waits for the state and answers then: park a
			// stand-in whose decision goes back to the caller.
			st := &scall{id: c.id, key: c.key, origin: to, inc: t.inc, issued: s.now}
			st.answered = -1
			t.waiting[c.key] = append(t.waiting[c.key], st)
			s.parked[st] = func(d ringlimit.Decision) { reply(func() { s.finish(c, d) }) }
			s.parkedMoved[st] = func(next string) { reply(func() { s.moved(n, c, to, next) }) }
			if a.Kind == Pull {
				s.pull(t, c.key, a.To, a.Inc)
			} else if a.Kind == Load {
				s.load(t, c.key, a.Cleared)
			}
		default:
			panic("forwarded: " + a.Kind.String())
		}
	}, func() {
		if n.inc != inc || c.done {
			return
		}
		c.tries++
		if ainc, ok := s.announced[to]; ok && s.nodes[to].inc == ainc && slices.Contains(n.view, to) && !n.core.Leaving() {
			// It announced its leave, after its push: node drops it from
			// this view and routes the call again (route.go's
			// leftOrLeaving), where the store would not know the state;
			// unless this node leaves too (two leavers that dropped each
			// other would each decide as the last member).
			s.pastLeaver++
			s.leaves(n, to, ainc)
			s.reroute(n, c)
			return
		}
		// Slow is not dead: while the owner is in this node's view, the
		// same call is sent again (it decides it once), for up to 2 s.
		if (c.tries < 3 || s.now-c.issued < 2000*ms) && slices.Contains(n.view, to) {
			s.forward(n, c, to, via) // the same call: the owner decides it once
			return
		}
		if !slices.Contains(n.view, to) && s.now-c.issued < 2000*ms {
			// It left this node's view (gone, or thought so) while the call
			// was out: the call goes where the view says now.
			s.reroute(n, c)
			return
		}
		s.storeDecide(n, c, to)
	})
}

// moved follows the answer "moved to next" that from gave for n's call c:
// on to next (with From), back through n's own chain if next is n, or, past
// the hop bound, round again from the start.
func (s *sim) moved(n *snode, c *scall, from, next string) {
	c.hops++
	switch {
	case c.hops > 4:
		s.reroute(n, c)
	case next == n.name:
		s.route(n, c, from)
	default:
		s.forward(n, c, next, from)
	}
}

// storeDecide decides c at the store: the member lost could not be
// reached ("" if the call bounced past the hop limit: no excuse, so no
// episode).
func (s *sim) storeDecide(n *snode, c *scall, lost string) {
	if c.done {
		return
	}
	if lost != "" && s.lost(n.name, lost, 3*100*ms) {
		s.credit(c.key, lost)
	} else if lost != "" {
		s.creditSlow(c.key)
	}
	s.storeDecs[c.key]++
	d, err := s.store.lim.AllowNAt(time.UnixMilli(s.base+s.now/ms), c.key, s.rules[c.key], 1)
	if err != nil {
		panic(err)
	}
	if d.Allowed {
		s.admitted[c.key]++
		s.replayAdmit(c.key, s.base+s.now/ms, "the store")
		s.logf("store admits %s for %s (#%d)", c.key, n.name, s.admitted[c.key])
	}
	s.finish(c, d)
}

// pull asks to for key's state on n's behalf.
func (s *sim) pull(n *snode, key, to string, want uint64) { s.pullGone(n, key, to, want, "", 0) }

func (s *sim) pullGone(n *snode, key, to string, want uint64, gone string, goneInc uint64) {
	inc := n.inc
	h := ring.Hash(key)
	path := slices.Clone(n.core.Path(key))
	s.logf("%s pulls %s from %s (inc %d)", n.name, key, to, want)
	start := s.now
	s.rpc(n.name, to, 80*ms, func(reply func(func())) {
		t := s.nodes[to]
		defer func() { s.logf("%s asked %s by %s", t.name, key, n.name) }()
		s.forks++ // (a fork's origin, not drawn from rng: the schedules stay as they were)
		r := t.core.Asked(Ask{Key: key, Hash: h, From: n.name, Inc: want, Path: path, Gone: gone, GoneInc: goneInc, Has: t.lim.Has(key), Now: s.nodeNow(t),
			Fork: splitmix(s.forks) | 1})
		a := r.A
		switch {
		case r.Give:
			st, ok := t.lim.Take(key)
			ver := s.next(t.vers[key], s.nodeNow(t))
			delete(t.vers, key)
			if ok {
				c := st
				t.core.GaveInAnswer(key, n.name, ver, &c, st.Until)
				a = Answer{Kind: State, St: &st, Ver: ver}
			} else {
				a = Answer{Kind: None}
			}
		case r.keep:
			st, ok := t.lim.Export(key)
			if ok {
				a = Answer{Kind: State, St: &st, Ver: t.vers[key]}
			}
		}
		reply(func() {
			delete(n.faulted, key)
			s.pulled(n, key, to, a)
		})
	}, func() {
		if n.inc != inc {
			return
		}
		if f := n.faulted[key]; s.faultIn(n.name, to, start, s.now) {
			if f.to != to {
				f = faulted{to: to}
			}
			f.n++
			n.faulted[key] = f
		} else {
			delete(n.faulted, key)
		}
		// A leaver this node's view dropped when it refused a push is
		// still in the membership (the gossip) until it leaves: alive,
		// and asked again (node's askPull says the same). Not once its
		// process is gone: node's connection is refused then, and its
		// membership drops it (a gossip that still names it, here, can
		// be one delivered late: classic seed 28269 asked a stopped
		// leaver for ever).
		t := s.nodes[to]
		leaving := slices.Contains(n.gossip, to) && !slices.Contains(n.view, to) && t != nil && t.alive
		s.pulled(n, key, to, Answer{Kind: Unreachable, Leaving: leaving})
	})
}

func (s *sim) pulled(n *snode, key, from string, a Answer) {
	h := ring.Hash(key)
	s.logf("%s pulled %s from %s: %d %s", n.name, key, from, a.Kind, a.To)
	inView := slices.Contains(n.view, from)
	act := n.core.Pulled(key, h, from, a, s.held(n, key), s.nodeNow(n))
	s.logf("%s pulled %s: ver %v -> %s %s install=%v", n.name, key, a.Ver, act.Kind, act.To, act.Install)
	if a.Kind == Unreachable && !(act.Kind == Pull && act.To == from) {
		// Given up on a member after maxPullTries unanswered pulls: the
		// exception the bound allows for if it crashed, or if the
		// failure detector dropped it (a false death) while it was cut
		// off or paused. A member this node's view still has alive is
		// never given up (slow, starved, paused or cut off for less
		// than detection): no excuse, so no episode.
		if f := n.faulted[key]; !inView && (s.lost(n.name, from, maxPullTries*80*ms) || f.to == from && f.n >= maxPullTries) {
			// (Lost too: every pull of it timed out for a fault, its
			// pauses and cuts together, even if no one lasted the bound.)
			s.credit(key, from)
		}
		delete(n.faulted, key)
	}
	if act.Drop != "" {
		// The member given up on hears of it: a state it gave in an
		// answer that never came here goes back to it.
		me, to := n.name, act.Drop
		s.send(me, to, func() { s.dropped(s.nodes[to], key, me) })
	}
	if act.Install {
		if act.St != nil {
			s.install(n, key, *act.St, act.Ver)
		} else {
			s.install(n, key, *a.St, a.Ver)
		}
	}
	switch act.Kind {
	case Pull:
		if a.Kind == Coming && act.To == from {
			// Asked again once its pull timeout has passed (node's
			// pullPause), not at once: the state is on its way.
			inc := n.inc
			s.at(s.now+80*ms, func() {
				s.deliver(n.name, inc, func() { s.pullGone(n, key, act.To, act.Inc, act.Gone, act.GoneInc) })
			})
			break
		}
		s.pullGone(n, key, act.To, act.Inc, act.Gone, act.GoneInc)
	case Load:
		s.load(n, key, act.Cleared)
	case Decide:
		s.release(n, key, true)
	case Forward:
		if act.PushTo != "" {
			s.pushTo(n, key, act.PushTo)
		}
		s.redirect(n, key, act.To)
	}
	if act.Install && act.St == nil {
		// Confirm: the member drops the copy it kept. As node's, it goes
		// after what the pull's end set off (the calls decided, the state
		// pushed on, perhaps back to that member): the confirm may come
		// after the state did, and after the member gave it on again.
		me, ver := n.name, a.Ver
		s.send(me, from, func() {
			s.logf("%s hears %s confirm %s", from, me, key)
			s.nodes[from].core.Confirmed(key, me, ver)
		})
	}
}

// dropped is t hearing that asker gave up its pull of key from t.
func (s *sim) dropped(t *snode, key, asker string) {
	st, ver, ok := t.core.Dropped(key, asker)
	s.logf("%s hears %s gave up pulling %s: back=%v", t.name, asker, key, ok)
	if ok {
		s.install(t, key, *st, ver)
		s.release(t, key, true)
	}
}

// pushTo pushes key's state, if held here, to the member to.
func (s *sim) pushTo(n *snode, key, to string) {
	if it, ok := s.give(n, key, to); ok {
		s.push(n, to, []pushed{it}, 0)
	}
}

// give takes key's state out of n's store for the member to: the core
// keeps a copy in its mark until to confirms it. false if n holds none.
func (s *sim) give(n *snode, key, to string) (pushed, bool) {
	st, ok := n.lim.Take(key)
	if !ok {
		return pushed{}, false
	}
	ver := s.next(n.vers[key], s.nodeNow(n))
	delete(n.vers, key)
	c := st
	n.core.Gave(key, to, ver, &c, st.Until)
	return pushed{key, st, ver, n.core.MarkInc(key)}, true
}

// next is the version a state takes when it leaves a holder at now (ms):
// Version.Next, whose epoch rises at every hand-over even when the clock
// has not moved on (within a ms, or on a taker whose clock is behind).
func (s *sim) next(v Version, now int64) Version {
	if s.cfg.bugs&bugEqualVersions != 0 {
		// The planted off-by-one: the epoch follows the clock, and stays
		// where the clock has not passed it.
		return Version{Epoch: max(v.Epoch, uint64(now)), Origins: v.Origins}
	}
	return v.Next(now)
}

// redirect sends the calls parked on key at n to the member to: n's own
// calls are forwarded, the ones forwarded to n answered "moved".
func (s *sim) redirect(n *snode, key, to string) {
	ws := n.waiting[key]
	delete(n.waiting, key)
	for _, c := range ws {
		if fin := s.parkedMoved[c]; fin != nil {
			delete(s.parkedMoved, c)
			delete(s.parked, c)
			fin(to)
			continue
		}
		s.forward(n, c, to, "")
	}
}

// load installs key's state from the store, then decides what waits.
func (s *sim) load(n *snode, key string, cleared []string) {
	inc := n.inc
	s.logf("%s loads %s from the store", n.name, key)
	s.loads[key]++
	s.at(s.now+s.rnd(100*us, 2*ms), func() {
		if n.inc != inc || !n.alive {
			return
		}
		// The claim, in the same script as the read: another member's
		// stands unless this pull cleared it (or it is this node's own
		// earlier incarnation).
		var claimant string
		var claimInc uint64
		if cl, ok := s.store.claims[key]; ok && cl.member != n.name && !slices.Contains(cleared, cl.member) {
			claimant, claimInc = cl.member, cl.inc
		} else {
			s.store.claims[key] = claim{n.name, uint64(n.inc)}
		}
		a := n.core.Loaded(key, claimant, claimInc)
		switch a.Kind {
		case Forward:
			s.redirect(n, key, a.To)
			return
		case Pull:
			s.logf("%s finds %s claimed by %s", n.name, key, claimant)
			s.pullGone(n, key, a.To, a.Inc, "", 0)
			return
		}
		if st, ok := s.store.lim.Export(key); ok && !n.lim.Has(key) {
			n.lim.Import(key, st)
			n.leases.arrived[key] = s.now
			// A load starts a branch of its own: two nodes that load one
			// key apart merge when they meet (counting the snapshot
			// twice: they admit less, never more).
			now := s.nodeNow(n)
			n.vers[key] = s.store.vers[key].Loaded(now, s.rng.Uint64()|1)
		}
		s.release(n, key, true)
	})
}

// release decides every call parked on key at n: the state is here now, or
// the key starts here.
func (s *sim) release(n *snode, key string, stray bool) {
	if stray && s.cfg.bugs&bugStrayFirst != 0 {
		// The planted order: the state goes on before the calls that
		// waited for it are decided, so they start the key afresh here.
		s.pushStray(n, key)
		stray = false
	}
	ws := n.waiting[key]
	delete(n.waiting, key)
	for _, c := range ws {
		if fin := s.parked[c]; fin != nil {
			delete(s.parked, c)
			delete(s.parkedMoved, c)
			d := s.decide(n, c)
			fin(d)
			continue
		}
		s.finish(c, s.decide(n, c))
	}
	if stray {
		s.pushStray(n, key)
	}
}

// pushStray pushes key's state to its owner if it is held here and another
// member owns it in n's view.
func (s *sim) pushStray(n *snode, key string) {
	if to := n.core.Stray(ring.Hash(key)); to != "" {
		s.pushTo(n, key, to) // (a leaving node's too: it keeps nothing)
	}
}

func (s *sim) storeWrite(key string, st ringlimit.State, ver Version) {
	if old, ok := s.store.vers[key]; ok && !old.Less(ver) {
		s.store.drop++
		return
	}
	s.store.lim.Take(key)
	s.store.lim.Import(key, st)
	s.store.vers[key] = ver
}

// writeBehind writes n's changed states to the store, each with its next
// version.
func (s *sim) writeBehind(n *snode) {
	if !n.alive || n.paused > s.now {
		return
	}
	type w struct {
		key string
		st  ringlimit.State
		ver Version
	}
	// Only the states changed since the last round are written (node's
	// Drain of the local store's TrackChanges marks): a state that merely
	// sits here is not written again. (Written every round, a holder's copy
	// overwrote, every 20 ms, what the store tier had decided from the
	// store's copy since; node never writes a state it did not change.)
	changed := map[string]bool{}
	n.lim.Drain(func(key string, _ memstore.State) { changed[key] = true })
	var ws []w
	n.lim.Range(func(key string, st memstore.State) bool {
		ws = append(ws, w{key, st, Version{}})
		return true
	})
	slices.SortFunc(ws, func(a, b w) int { return strings.Compare(a.key, b.key) }) // (the store's order is not the seed's)
	for _, x := range ws {
		// The write travels: a late one must not overwrite a newer state.
		// (A delay is drawn for every state held, written or not: the
		// seeds' schedules stay as they were.)
		d := s.rnd(100*us, 30*ms)
		if !changed[x.key] {
			continue
		}
		v := n.vers[x.key]
		v.Seq++
		n.vers[x.key] = v
		x.ver = v
		s.at(s.now+d, func() { s.storeWrite(x.key, x.st, x.ver) })
	}
}

// reroute sends c down n's chain again, from the start, a moment later: it
// bounced between members whose views disagree, or its owner left the view.
// Past 2 s of waiting it goes to the store (an episode only if a member it
// needed was lost).
func (s *sim) reroute(n *snode, c *scall) {
	if s.now-c.issued >= 2000*ms {
		s.storeDecide(n, c, "")
		return
	}
	c.hops, c.tries = 0, 0
	inc := n.inc
	s.at(s.now+20*ms, func() { s.deliver(n.name, inc, func() { s.route(n, c, "") }) })
}

// splitmix is SplitMix64's output function: distinct origins from a counter.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// --- settling (Core.Settle) -------------------------------------------

// maxSettleTries bounds the rounds a node tries for one view: node tries
// again every little while as long as a change stays open; here the
// schedule must end.
const maxSettleTries = 30

// simIdle is a member's word for Settle: its core is Idle and its pushes
// are confirmed.
func simIdle(n *snode) bool {
	return n.alive && n.pushes == 0 && !n.pushFail && n.core.Idle()
}

// scheduleSettle has n try, a moment from now, to settle the ring changes
// it still has open (see Core.Settle), unless its view changed meanwhile.
func (s *sim) scheduleSettle(n *snode, tries int) {
	if tries >= maxSettleTries {
		return
	}
	inc, id := n.inc, n.core.ViewID()
	s.at(s.now+s.rnd(50*ms, 300*ms), func() {
		if !n.alive || n.inc != inc || n.core.ViewID() != id || n.core.Sources() == 0 {
			return
		}
		if n.paused > s.now {
			s.at(n.paused, func() { s.scheduleSettle(n, tries) })
			return
		}
		s.settleRound(n, inc, id, nil, tries)
	})
}

// settleRound asks every other member of n's view for its word: Idle in
// the view id, and its Arrivals. first is nil in the first round, else the
// counts the first round found; the second round settles if every word is
// the same.
func (s *sim) settleRound(n *snode, inc int, id uint64, first map[string]uint64, tries int) {
	retry := func() { s.scheduleSettle(n, tries+1) }
	if !simIdle(n) || first != nil && first[n.name] != n.core.Arrivals() {
		retry()
		return
	}
	counts := map[string]uint64{n.name: n.core.Arrivals()}
	var others []string
	for _, m := range n.view {
		if m != n.name {
			others = append(others, m)
		}
	}
	waiting, over := len(others), false
	end := func() {
		if n.inc != inc || !n.alive || n.core.ViewID() != id || !simIdle(n) {
			retry()
			return
		}
		if first == nil {
			s.settleRound(n, inc, id, counts, tries)
			return
		}
		if n.core.Arrivals() != first[n.name] {
			retry()
			return
		}
		if *simNoSettle {
			s.logf("%s would settle view %d", n.name, id)
			return
		}
		before := n.core.Sources()
		clean := n.core.Settle(id)
		s.logf("%s settles view %d: %d changes open before, %d after", n.name, id, before, n.core.Sources())
		if clean {
			s.maybeDone(n)
		}
	}
	if waiting == 0 {
		end()
		return
	}
	// A word lost on the way ends the round: it is tried again.
	s.at(s.now+500*ms, func() {
		if !over && waiting > 0 {
			over = true
			if n.inc == inc && n.alive {
				retry()
			}
		}
	})
	for _, m := range others {
		s.send(n.name, m, func() {
			t := s.nodes[m]
			ok := simIdle(t) && t.core.ViewID() == id
			cnt := t.core.Arrivals()
			s.send(m, n.name, func() {
				if over || n.inc != inc {
					return
				}
				if !ok || first != nil && first[m] != cnt {
					over = true
					retry()
					return
				}
				counts[m] = cnt
				if waiting--; waiting == 0 {
					over = true
					end()
				}
			})
		})
	}
}
