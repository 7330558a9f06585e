package memstore

import (
	"github.com/ringlimit/ringlimit"
)

// State is one key's state in the form other packages carry (see
// ringlimit.State): node hands it to a key's next owner and writes it behind
// to the central store, whose scripts keep the same fields.
type State = ringlimit.State

// LogEntry is Count hits admitted at the same millisecond Stamp.
type LogEntry = ringlimit.LogEntry

// dirtyBit marks an entry whose state changed since the last Drain. It lives
// in the tag, above every window the rules allow (a window in ms fits in 48
// bits), so tracking costs no memory per key.
const dirtyBit = 1 << 55

// A state's index among the rules of AllowAll lives in the tag too, in bits
// 48–50: a key's state at index i > 0 is an entry of its own with the same
// key string, so it shares the key's hash, shard and ring arcs (hand-off
// and RangeArcs find it with the key), and a lookup compares the key and
// the index. AllowN uses index 0.
const (
	idxShift = 48
	idxMask  = (ringlimit.MaxRules - 1) << idxShift
	// windowMask is the tag's window bits.
	windowMask = 1<<idxShift - 1
)

// export copies e's state out.
func (e *entry) export() State {
	t := e.tag &^ dirtyBit
	s := State{Algorithm: ringlimit.Algorithm(t >> 56), Window: int64(t & windowMask), Index: int(t & idxMask >> idxShift), Until: e.until,
		A: e.st.a, B: e.st.b, C: e.st.c}
	if l := e.st.log; l != nil && l.n > 0 {
		s.Log = make([]LogEntry, l.n)
		for i := range l.n {
			v := l.slot(i)
			s.Log[i] = LogEntry{Stamp: l.stamp(v), Count: int64(v & maxSlotCount)}
		}
	}
	return s
}

// stateOf builds the in-memory state for s.
func stateOf(s State) state {
	st := state{a: s.A, b: s.B, c: s.C}
	if s.Algorithm == ringlimit.SlidingLog && len(s.Log) > 0 {
		l := &stampLog{}
		var limit int64
		for _, e := range s.Log {
			limit += e.Count
		}
		for _, e := range s.Log {
			if e.Count > 0 && (l.n == 0 || e.Stamp > l.newest()) {
				l.add(e.Stamp, e.Count, limit)
			}
		}
		st.log = l
	}
	return st
}

// live reports whether e holds a state that still matters at now.
func (e *entry) live(now int64) bool { return e.key != "" && e.until > now }

// Export returns key's state at index 0 (the one AllowN uses), if it holds
// one that still matters.
func (l *Limiter) Export(key string) (State, bool) {
	s, frag := l.locate(key)
	now := l.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.lookup(key, frag, 0)
	if !ok || !s.at(i).live(now) {
		return State{}, false
	}
	e := s.at(i)
	return s.fold(key, e.tag&^dirtyBit, e.export(), now), true
}

// Has reports whether key holds a state at index 0 that still matters. It
// allocates nothing.
func (l *Limiter) Has(key string) bool {
	s, frag := l.locate(key)
	now := l.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.lookup(key, frag, 0)
	return ok && s.at(i).live(now)
}

// TakeAll appends to dst every state of key that still matters (one per
// index, in index order) and forgets every state of the key, in one step:
// no call decides on the key between the two. It is Take for a key that
// AllowAll may have used: a hand-off moves all of a key's states together.
func (l *Limiter) TakeAll(key string, dst []State) []State {
	s, frag := l.locate(key)
	now := l.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var slots [ringlimit.MaxRules]int32
	var es [ringlimit.MaxRules]*entry
	s.lookupAll(key, frag, ringlimit.MaxRules, &slots, &es)
	s.holes.forget(key)       // they leave with the state (holes.go)
	for _, i := range slots { // removing one leaves the others' slots as they are
		if i != none {
			if e := s.at(i); e.live(now) {
				dst = append(dst, s.fold(key, e.tag&^dirtyBit, e.export(), now)) // (a floor leaves folded in: floor.go)
			}
			s.remove(i)
		}
	}
	s.forgetFloor(key)
	return dst
}

// Take returns key's states, if it holds one that still matters, and
// forgets them all, in one step: no call decides on the key between the
// two. The State returned is the live state of the lowest index (0, the
// one AllowN uses, for a key only AllowN uses), and its More holds the
// key's other live states (see AllowAll), in index order: Import puts them
// all back.
func (l *Limiter) Take(key string) (State, bool) {
	var buf [ringlimit.MaxRules]State
	all := l.TakeAll(key, buf[:0])
	if len(all) == 0 {
		return State{}, false
	}
	st := all[0]
	if len(all) > 1 {
		st.More = append([]State(nil), all[1:]...)
	}
	return st, true
}

// Import installs st as key's state at index st.Index if the key holds none
// there that still matters, and each of st.More likewise, and reports
// whether it installed any. A state that no longer matters, or whose Index
// is not below ringlimit.MaxRules, is ignored. An imported state is not
// marked changed for Drain.
func (l *Limiter) Import(key string, st State) bool { return l.importAll(key, st, false) }

// ImportChanged is Import for a state handed over from another holder: what
// it installs is marked changed for Drain (Config.TrackChanges), so that
// the next write-behind writes it. The giver's last changes may not have
// reached the store (taking a state out drops its mark), and the store
// tier decides from the store's copy.
func (l *Limiter) ImportChanged(key string, st State) bool { return l.importAll(key, st, true) }

func (l *Limiter) importAll(key string, st State, mark bool) bool {
	done := l.import1(key, st, mark)
	for _, m := range st.More {
		m.More = nil
		done = l.import1(key, m, mark) || done
	}
	return done
}

func (l *Limiter) import1(key string, st State, mark bool) bool {
	s, frag := l.locate(key)
	now := l.now()
	if st.Until <= now || uint(st.Index) >= ringlimit.MaxRules || ringlimit.ValidateKey(key) != nil {
		return false
	}
	idx := uint64(st.Index)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.lookup(key, frag, idx)
	if ok && s.at(i).live(now) {
		return false
	}
	if !ok {
		i = s.insert(key, frag, idx, now)
	}
	e := s.at(i)
	e.tag = uint64(st.Algorithm)<<56 | idx<<idxShift | uint64(st.Window)&windowMask
	e.until = st.Until
	*s.denyAt(i) = 0 // not known to deny until a decision here finds it so
	s.dropLog(i)
	s.bytes -= e.st.bytes()
	e.st = stateOf(st)
	s.bytes += e.st.bytes()
	s.holes.forget(key) // a record left from before is not this state's (holes.go)
	s.forgetFloor(key)  // nor a floor: the state came with any it had folded in
	if mark && s.track {
		e.tag |= dirtyBit
		s.dirty = append(s.dirty, i)
	}
	s.settleRing(i, nil, now, key)
	s.shed(now, key)
	return true
}

// Range calls f with each key that holds a state that still matters, and its
// state (once per state: a key AllowAll used may come once per index, with
// State.Index telling them apart), shard by shard, until f returns false. Each shard is copied under
// its lock and f runs without it, so f may call the Limiter.
func (l *Limiter) Range(f func(key string, s State) bool) {
	now := l.now()
	type kv struct {
		key string
		s   State
	}
	var buf []kv
	for i := range l.shards {
		s := &l.shards[i]
		buf = buf[:0]
		s.mu.Lock()
		s.indexRange(func(j int32) {
			if e := s.at(j); e.live(now) {
				k := s.keyOut(j)
				buf = append(buf, kv{k, s.fold(k, e.tag&^dirtyBit, e.export(), now)})
			}
		})
		s.mu.Unlock()
		for _, x := range buf {
			if !f(x.key, x.s) {
				return
			}
		}
	}
}

// Drain calls f with each key whose state an admitted call changed since the
// last Drain, and its state now (once per changed index, see State.Index), and clears the marks. It needs
// Config.TrackChanges; without it there is nothing to drain. f runs under
// the key's shard lock: it must be quick and must not call the Limiter.
func (l *Limiter) Drain(f func(key string, s State)) {
	now := l.now()
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		dirty := s.dirty
		s.dirty = s.spare[:0]
		for _, j := range dirty {
			if e := s.at(j); e.tag&dirtyBit != 0 {
				e.tag &^= dirtyBit
				if e.live(now) {
					k := s.keepKey(j)
					f(k, s.fold(k, e.tag&^dirtyBit, e.export(), now))
				}
			}
		}
		s.spare = dirty[:0]
		s.mu.Unlock()
	}
}
