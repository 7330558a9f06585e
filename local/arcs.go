package local

// Arc is a stretch of the hash ring, in the space of Config.Hash: the hashes
// h with Start < h ≤ End, going round past 2^64−1 to 0 when End < Start (a
// ring's point owns the arc from the point before it). Start == End is the
// whole ring.
type Arc struct{ Start, End uint64 }

// RangeArcs calls f with each key whose hash (Config.Hash) falls in one of
// arcs and that holds a state that still matters, and its state, until f
// returns false. Its work is proportional to the keys in the arcs plus a
// little per arc and shard it touches, not to the keys held: the index keeps
// keys in hash order. Each shard's part of an arc is copied under its lock
// and f runs without it, so f may call the Limiter (Take, say). A key is
// reported once per arc that holds it.
func (l *Limiter) RangeArcs(arcs []Arc, f func(key string, s State) bool) {
	var buf []kv
	for _, a := range arcs {
		// As closed intervals [lo, hi] of hashes, at most two.
		if a.Start == a.End {
			if !l.rangeClosed(0, ^uint64(0), &buf, f) {
				return
			}
			continue
		}
		if a.End < a.Start {
			if a.Start != ^uint64(0) && !l.rangeClosed(a.Start+1, ^uint64(0), &buf, f) {
				return
			}
			if !l.rangeClosed(0, a.End, &buf, f) {
				return
			}
			continue
		}
		if !l.rangeClosed(a.Start+1, a.End, &buf, f) {
			return
		}
	}
}

type kv struct {
	key string
	s   State
}

// rangeClosed reports the keys with lo ≤ hash ≤ hi, shard by shard.
func (l *Limiter) rangeClosed(lo, hi uint64, buf *[]kv, f func(string, State) bool) bool {
	now := l.now()
	k := l.shardBits
	first, last := lo>>(64-k)&(1<<k-1), hi>>(64-k)&(1<<k-1)
	for si := first; si <= last; si++ {
		// The part of [lo, hi] in shard si, as fragments.
		flo, fhi := uint32(0), ^uint32(0)
		if si == first {
			flo = uint32(lo << k >> 32)
		}
		if si == last {
			fhi = uint32(hi << k >> 32)
		}
		s := &l.shards[si]
		*buf = (*buf)[:0]
		s.mu.Lock()
		s.scan(flo, fhi, func(i int32, frag uint32) {
			e := s.at(i)
			if !e.live(now) {
				return
			}
			if frag == flo || frag == fhi { // at an edge: the fragment cannot tell
				if h := l.hashOf(e.key); h < lo || h > hi {
					return
				}
			}
			*buf = append(*buf, kv{e.key, e.export()})
		})
		s.mu.Unlock()
		for _, x := range *buf {
			if !f(x.key, x.s) {
				return false
			}
		}
	}
	return true
}

// scan calls f with the slot and fragment of every key whose fragment is in
// [flo, fhi] (and some others). A key sits at or after its home bucket, with
// no empty bucket between, so every key whose home is in [home(flo),
// home(fhi)] is in the buckets from home(flo) to the first empty one after
// home(fhi).
func (s *shard) scan(flo, fhi uint32, f func(i int32, frag uint32)) {
	mask := uint32(len(s.buckets) - 1)
	p, span := s.home(flo), s.home(fhi)-s.home(flo)
	for step := uint32(0); step <= mask; step, p = step+1, (p+1)&mask {
		v := s.buckets[p]
		if v == 0 {
			if step >= span {
				return
			}
			continue
		}
		if frag := uint32(v >> 32); frag >= flo && frag <= fhi {
			f(int32(uint32(v))-1, frag)
		}
	}
}
