package hold

// Leases in the simulator, as node's shell gives them (node/lease.go): a
// node that forwards a key asks the member it forwarded to for a lease; a
// member that holds the key's state grants one from it (memstore's Lease,
// which consumes the hits in the state at once and declines where it must),
// unless the state came to it less than a lease's life ago; the borrower
// decides calls made on it from the lease until it runs out or expires, and
// gives back what is left; a holder that denies a call recalls its leases
// (their unused hits come back, memstore's Return). A borrower that crashes
// strands its lease. The invariant is unchanged: what leases admit counts
// in admitted like any other decision.

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit"
)

// simLeaseTTL is a lease's life in the simulator.
const simLeaseTTL = 100 * ms

// simLease is a lease a node holds.
type simLease struct {
	left    int64
	until   int64 // sim µs
	from    string
	fromInc int   // the incarnation of from that granted it
	lentAt  int64 // sim µs, when from granted it
	id      uint64
}

// simGrant is a lease a holder gave.
type simGrant struct {
	to    string
	n     int64
	took  int64 // the holder's clock, ms (memstore's Return)
	until int64 // sim µs, with a margin past the borrower's
}

type recalledID struct {
	from string
	id   uint64
}

type simLeases struct {
	held     map[string]*simLease
	asking   map[string]bool
	lent     map[string]map[uint64]simGrant
	arrived  map[string]int64    // key → sim µs its state last came here
	recalled map[recalledID]bool // grants recalled before they arrived
	// recalling holds the grants whose recall is on its way, as node's: a
	// denial meanwhile sends none of its own (it waits for that one, at
	// most as long as its caller can, which the simulator's holder does
	// not: it denies at once).
	recalling map[uint64]uint64 // (the recall's mark: a later one is not ended by an earlier one's timeout)
	nextID    uint64
}

func (l *simLeases) reset() {
	*l = simLeases{held: map[string]*simLease{}, asking: map[string]bool{}, lent: map[string]map[uint64]simGrant{},
		arrived: map[string]int64{}, recalled: map[recalledID]bool{}, recalling: map[uint64]uint64{}}
}

// fromLease decides c at n from a lease, if n holds one of its key that
// covers it now.
func (s *sim) fromLease(n *snode, c *scall) bool {
	b := n.leases.held[c.key]
	if b == nil || s.now >= b.until || b.left < 1 {
		return false
	}
	b.left--
	s.admitted[c.key]++
	s.leased++
	s.logf("%s admits %s from its lease of %s (#%d, call %d, %d left)", n.name, c.key, b.from, s.admitted[c.key], c.id, b.left)
	s.finish(c, ringlimit.Decision{Allowed: true})
	return true
}

// askLease has n ask the member to for a lease of key, unless it asks
// already.
func (s *sim) askLease(n *snode, key, to string) {
	if n.leases.asking[key] || to == n.name {
		return
	}
	n.leases.asking[key] = true
	inc, sent := n.inc, s.now
	s.rpc(n.name, to, 80*ms, func(reply func(func())) {
		t := s.nodes[to]
		got, id := s.grant(t, key, n.name)
		tinc, lentAt := t.inc, s.now
		reply(func() {
			delete(n.leases.asking, key)
			if got <= 0 || n.inc != inc {
				return
			}
			if n.leases.recalled[recalledID{to, id}] {
				delete(n.leases.recalled, recalledID{to, id})
				s.giveBack(n, key, &simLease{left: got, from: to, id: id})
				return
			}
			if old := n.leases.held[key]; old != nil {
				s.giveBack(n, key, old)
			}
			b := &simLease{left: got, until: sent + simLeaseTTL, from: to, fromInc: tinc, lentAt: lentAt, id: id}
			n.leases.held[key] = b
			s.at(b.until, func() { s.expireLease(n, inc, key, b) })
		})
	}, func() {
		if n.inc == inc {
			delete(n.leases.asking, key)
		}
	})
}

// grant is t's answer to a lease request of key from the member to: the
// hits taken from the key's state, or none.
func (s *sim) grant(t *snode, key, to string) (int64, uint64) {
	ls := &t.leases
	if !t.lim.Has(key) || t.core.Leaving() || s.now-ls.arrived[key] < simLeaseTTL {
		return 0, 0
	}
	rule := s.rules[key]
	now := time.UnixMilli(s.nodeNow(t))
	d, _ := t.lim.AllowNAt(now, key, rule, 0)
	out := int64(0)
	for _, g := range ls.lent[key] {
		if s.now < g.until {
			out += g.n
		}
	}
	got, _, err := t.lim.Lease(now, key, rule, max(1, d.Remaining/2), out, time.Duration(simLeaseTTL/ms)*time.Millisecond)
	if err != nil {
		panic(err)
	}
	if got <= 0 {
		return 0, 0
	}
	ls.nextID++
	if ls.lent[key] == nil {
		ls.lent[key] = map[uint64]simGrant{}
	}
	ls.lent[key][ls.nextID] = simGrant{to: to, n: got, took: s.nodeNow(t), until: s.now + simLeaseTTL + 20*ms}
	s.logf("%s lends %d of %s to %s (lease %d)", t.name, got, key, to, ls.nextID)
	return got, ls.nextID
}

// expireLease ends n's lease b of key, if it is still the one held, and
// gives back what it has left.
func (s *sim) expireLease(n *snode, inc int, key string, b *simLease) {
	if n.inc != inc || n.leases.held[key] != b {
		return
	}
	delete(n.leases.held, key)
	s.checkStranded(n, key, b)
	s.giveBack(n, key, b)
}

// checkStranded reports a lease b of key that ends at its borrower n with
// hits left although its grantor denied a call of key well before, with
// nothing in the way: a key driven to its limit admits its limit only if
// the holder, before it denies, recalls what its leases have not used
// (node's lease.go), and a recall reaches a borrower in a message's delay
// (slowMax and the 3 ms of a packet's, past which the borrower would have
// given the lease up), unless a fault held it up (a pause, a cut, a
// dropped connection, a crash: faultIn, from the earliest recall a denial
// may have joined).
func (s *sim) checkStranded(n *snode, key string, b *simLease) {
	if b.left <= 0 {
		return
	}
	by := s.cfg.mix.slowMax + 3*ms + 1*ms
	for _, td := range s.denials[deniedAt{b.from, b.fromInc, key}] {
		if td < b.lentAt || s.now-td <= by || s.faultIn(b.from, n.name, td-simRecallBy, s.now) {
			continue
		}
		s.stranded = append(s.stranded, fmt.Sprintf("%s's lease %d of %s from %s ended with %d hits left, %.0f ms after %s denied a call of %s",
			n.name, b.id, key, b.from, b.left, float64(s.now-td)/float64(ms), b.from, key))
		return
	}
}

// deniedAt names the denials of one key by one member incarnation.
type deniedAt struct {
	member string
	inc    int
	key    string
}

// giveBack sends what b has left to the member that granted it.
func (s *sim) giveBack(n *snode, key string, b *simLease) {
	left := b.left
	b.left = 0
	if left <= 0 {
		return
	}
	from, id := b.from, b.id
	s.send(n.name, from, func() { s.takeBack(s.nodes[from], n.name, key, id, left) })
}

// takeBack returns what a lease had left to t's state, if the grant is
// still on its books, was made to from, and the state is here.
func (s *sim) takeBack(t *snode, from, key string, id uint64, left int64) {
	g, ok := t.leases.lent[key][id]
	if !ok || g.to != from {
		return
	}
	delete(t.leases.lent[key], id)
	if left > 0 && t.lim.Has(key) {
		if s.cfg.bugs&bugLeaseTwice != 0 {
			t.lim.Return(time.UnixMilli(s.nodeNow(t)), key, s.rules[key], min(left, g.n), time.UnixMilli(g.took))
		}
		t.lim.Return(time.UnixMilli(s.nodeNow(t)), key, s.rules[key], min(left, g.n), time.UnixMilli(g.took))
		s.logf("%s takes back %d of %s (lease %d)", t.name, min(left, g.n), key, id)
	}
}

// recall asks the borrowers of t's leases of key to give them up: one
// recall of a grant on its way at a time, as node's. A recall is on its
// way until its borrower has it, or for simRecallBy if it is lost (node's
// waits for the answer too: a denial meanwhile sends none in either).
func (s *sim) recall(t *snode, key string) {
	lent := t.leases.lent[key]
	for _, id := range slices.Sorted(maps.Keys(lent)) { // (in order: a schedule is its seed's alone)
		g := lent[id]
		if s.now >= g.until+simLeaseTTL {
			delete(t.leases.lent[key], id)
			continue
		}
		if t.leases.recalling[id] != 0 {
			s.joinedRecalls++
			continue
		}
		s.seq++
		mark, inc, to := s.seq, t.inc, g.to
		t.leases.recalling[id] = mark
		done := func() {
			if t.inc == inc && t.leases.recalling[id] == mark {
				delete(t.leases.recalling, id)
			}
		}
		s.at(s.now+simRecallBy, done)
		s.send(t.name, to, func() {
			done()
			b := s.nodes[to].leases.held[key]
			if b == nil || b.id != id || b.from != t.name {
				s.nodes[to].leases.recalled[recalledID{t.name, id}] = true // it goes back when it comes
				return
			}
			delete(s.nodes[to].leases.held, key)
			s.giveBack(s.nodes[to], key, b)
		})
	}
}

// simRecallBy is how long a recall that is lost is taken to be on its way.
const simRecallBy = 80 * ms
