package local

// Arc is a stretch of the hash ring, in the space of Config.Hash: the hashes
// h with Start < h ≤ End, going round past 2^64−1 to 0 when End < Start (a
// ring's point owns the arc from the point before it). Start == End is the
// whole ring.
type Arc struct{ Start, End uint64 }

// RangeArcs calls f with each key whose hash (Config.Hash) falls in one of
// arcs and that holds a state that still matters, and its state, until f
// returns false. It reads each shard's index once, 8 bytes a key, and the
// entries only of the keys in the arcs (the index holds each key's top 32
// hash bits): at 1M keys a few milliseconds, a small part of a Range. Each
// shard's part is copied under its lock and f runs without it, so f may
// call the Limiter (Take, say). A key is reported once, shard by shard.
func (l *Limiter) RangeArcs(arcs []Arc, f func(key string, s State) bool) {
	// As closed intervals [lo, hi] of hashes: one or two an arc.
	var spans [][2]uint64
	for _, a := range arcs {
		switch {
		case a.Start == a.End:
			spans = append(spans, [2]uint64{0, ^uint64(0)})
		case a.End < a.Start:
			if a.Start != ^uint64(0) {
				spans = append(spans, [2]uint64{a.Start + 1, ^uint64(0)})
			}
			spans = append(spans, [2]uint64{0, a.End})
		default:
			spans = append(spans, [2]uint64{a.Start + 1, a.End})
		}
	}
	if len(spans) == 0 {
		return
	}
	// The ring in 2^16 cells by the hash's top 16 bits: each wholly in the
	// arcs, partly, or not at all. Only a key in a cell partly in them is
	// hashed again to tell.
	const (
		out = iota
		part
		whole
	)
	cells := make([]uint8, 1<<16)
	for _, sp := range spans {
		lo, hi := sp[0], sp[1]
		clo, chi := lo>>48, hi>>48
		for c := clo; c <= chi; c++ {
			v := uint8(whole)
			if (c == clo && lo != c<<48) || (c == chi && hi != c<<48|(1<<48-1)) {
				v = part
			}
			cells[c] = max(cells[c], v)
		}
	}
	in := func(h uint64) bool {
		for _, sp := range spans {
			if sp[0] <= h && h <= sp[1] {
				return true
			}
		}
		return false
	}
	now := l.now()
	var buf []kv
	for si := range l.shards {
		s := &l.shards[si]
		buf = buf[:0]
		s.mu.Lock()
		for _, v := range s.buckets {
			if v == 0 {
				continue
			}
			switch cells[v>>48] {
			case out:
				continue
			case part:
				if !in(l.hashOf(s.at(int32(uint32(v)) - 1).key)) {
					continue
				}
			}
			if e := s.at(int32(uint32(v)) - 1); e.live(now) {
				buf = append(buf, kv{e.key, e.export()})
			}
		}
		s.mu.Unlock()
		for _, x := range buf {
			if !f(x.key, x.s) {
				return
			}
		}
	}
}

type kv struct {
	key string
	s   State
}
