package memstore

import (
	"cmp"
	"slices"
)

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
// call the Limiter (Take, say). A state is reported once, shard by shard
// (a key AllowAll used comes once per index; see State.Index).
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
	// The ring in 2^16 cells by the hash's top 16 bits, as two bit sets
	// (16 KiB, in L1 while the buckets stream by): cells wholly in the arcs,
	// and cells partly in them, whose keys are hashed again to tell.
	var whole, part [1 << 10]uint64
	for _, sp := range spans {
		lo, hi := sp[0], sp[1]
		clo, chi := lo>>48, hi>>48
		for c := clo; c <= chi; c++ {
			if (c == clo && lo != c<<48) || (c == chi && hi != c<<48|(1<<48-1)) {
				part[c>>6] |= 1 << (c & 63)
			} else {
				whole[c>>6] |= 1 << (c & 63)
			}
		}
	}
	var near [1 << 10]uint64
	for i := range near {
		near[i] = whole[i] | part[i]
	}
	// Sorted and merged, so a key in a part cell finds its span by binary
	// search on its fragment, and is hashed again only when the fragment
	// is a span's first or last.
	slices.SortFunc(spans, func(a, b [2]uint64) int { return cmp.Compare(a[0], b[0]) })
	merged := spans[:1]
	for _, sp := range spans[1:] {
		if last := &merged[len(merged)-1]; sp[0] <= last[1] || last[1]+1 == sp[0] {
			last[1] = max(last[1], sp[1])
		} else {
			merged = append(merged, sp)
		}
	}
	spans = merged
	in := func(frag uint32, key string) bool {
		i, _ := slices.BinarySearchFunc(spans, frag, func(sp [2]uint64, f uint32) int { return cmp.Compare(uint32(sp[0]>>32), f+1) })
		h, hashed := uint64(0), false
		for j := i - 1; j >= 0 && uint32(spans[j][1]>>32) >= frag; j-- {
			lo, hi := uint32(spans[j][0]>>32), uint32(spans[j][1]>>32)
			if lo < frag && frag < hi {
				return true
			}
			if !hashed {
				h, hashed = l.hashOf(key), true
			}
			if spans[j][0] <= h && h <= spans[j][1] {
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
			// One test per bucket, empty or not, and a branch taken only
			// for the keys near the arcs: predictable (measured: testing for
			// empty first mispredicts on half the buckets and costs twice).
			c := v >> 48
			if near[c>>6]>>(c&63)&1 == 0 || v == 0 {
				continue
			}
			if whole[c>>6]>>(c&63)&1 == 0 && !in(uint32(v>>32), s.at(int32(uint32(v))-1).key) {
				continue
			}
			if i := int32(uint32(v)) - 1; s.at(i).live(now) {
				k := s.keyOut(i)
				buf = append(buf, kv{k, s.fold(k, s.at(i).tag&^dirtyBit, s.at(i).export(), now)})
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
