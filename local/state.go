package local

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

// export copies e's state out.
func (e *entry) export() State {
	t := e.tag &^ dirtyBit
	s := State{Algorithm: ringlimit.Algorithm(t >> 56), Window: int64(t & (1<<55 - 1)), Until: e.until,
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

// Export returns key's state, if it holds one that still matters.
func (l *Limiter) Export(key string) (State, bool) {
	s, frag := l.locate(key)
	now := l.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.lookup(key, frag)
	if !ok || !s.at(i).live(now) {
		return State{}, false
	}
	return s.at(i).export(), true
}

// Has reports whether key holds a state that still matters. It allocates
// nothing.
func (l *Limiter) Has(key string) bool {
	s, frag := l.locate(key)
	now := l.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.lookup(key, frag)
	return ok && s.at(i).live(now)
}

// Take returns key's state, if it holds one that still matters, and forgets
// the key, in one step: no call decides on the key between the two.
func (l *Limiter) Take(key string) (State, bool) {
	s, frag := l.locate(key)
	now := l.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.lookup(key, frag)
	if !ok {
		return State{}, false
	}
	e := s.at(i)
	st, live := e.export(), e.live(now)
	s.remove(i)
	return st, live
}

// Import installs st as key's state if the key holds none that still
// matters, and reports whether it did. A state that no longer matters is
// ignored. An imported state is not marked changed for Drain.
func (l *Limiter) Import(key string, st State) bool {
	s, frag := l.locate(key)
	now := l.now()
	if st.Until <= now || ringlimit.ValidateKey(key) != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.lookup(key, frag)
	if ok && s.at(i).live(now) {
		return false
	}
	if !ok {
		i = s.insert(key, frag, now)
	}
	e := s.at(i)
	e.tag = uint64(st.Algorithm)<<56 | uint64(st.Window)
	e.until = st.Until
	s.bytes -= e.st.bytes()
	e.st = stateOf(st)
	s.bytes += e.st.bytes()
	s.shed(now, i)
	return true
}

// Range calls f with each key that holds a state that still matters, and its
// state, shard by shard, until f returns false. Each shard is copied under
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
				buf = append(buf, kv{e.key, e.export()})
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
// last Drain, and its state now, and clears the marks. It needs
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
					f(e.key, e.export())
				}
			}
		}
		s.spare = dirty[:0]
		s.mu.Unlock()
	}
}
