package local

import "hash/maphash"

// The shard's index from key to slot: open addressing with linear probing,
// one uint64 per bucket (the key's 32-bit hash and its slot + 1; 0 is
// empty), kept between 3/8 and 3/4 full. At 8 bytes a bucket that is 11–21
// bytes a key, a third of what a map[string]int32 costs here, and the key
// itself is stored once, in its entry.

const minBuckets = 8

func (s *shard) initIndex(seed maphash.Seed) {
	s.seed = seed
	s.buckets = make([]uint64, minBuckets)
	s.nkeys = 0
}

func (s *shard) hash(key string) uint32 { return uint32(maphash.String(s.seed, key) >> 32) }

// lookup returns key's slot.
func (s *shard) lookup(key string) (int32, bool) { return s.lookupHash(key, s.hash(key)) }

// lookupHash is lookup for a key whose hash is h (the key is hashed once
// per call: the shard is chosen from the same 64-bit hash).
func (s *shard) lookupHash(key string, h uint32) (int32, bool) {
	mask := uint32(len(s.buckets) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		v := s.buckets[p]
		if v == 0 {
			return none, false
		}
		if uint32(v>>32) == h {
			if i := int32(uint32(v)) - 1; s.at(i).key == key {
				return i, true
			}
		}
	}
}

// indexPut records that key (absent) is in slot i.
func (s *shard) indexPut(key string, i int32) {
	if (s.nkeys+1)*4 > len(s.buckets)*3 {
		s.resize(2 * len(s.buckets))
	}
	s.place(uint64(s.hash(key))<<32 | uint64(uint32(i+1)))
	s.nkeys++
}

func (s *shard) place(v uint64) {
	mask := uint32(len(s.buckets) - 1)
	p := uint32(v>>32) & mask
	for s.buckets[p] != 0 {
		p = (p + 1) & mask
	}
	s.buckets[p] = v
}

func (s *shard) resize(n int) {
	old := s.buckets
	s.buckets = make([]uint64, n)
	for _, v := range old {
		if v != 0 {
			s.place(v)
		}
	}
}

// indexDel forgets key, which is in the index; its entry still holds it.
func (s *shard) indexDel(key string) {
	h := s.hash(key)
	mask := uint32(len(s.buckets) - 1)
	p := h & mask
	for {
		v := s.buckets[p]
		if v == 0 {
			return // not there
		}
		if uint32(v>>32) == h && s.at(int32(uint32(v))-1).key == key {
			break
		}
		p = (p + 1) & mask
	}
	// Backward-shift deletion: move up every later bucket of the run whose
	// home is not between the hole and itself, so no probe sequence breaks.
	for j := (p + 1) & mask; s.buckets[j] != 0; j = (j + 1) & mask {
		home := uint32(s.buckets[j]>>32) & mask
		if (j-home)&mask >= (j-p)&mask {
			s.buckets[p] = s.buckets[j]
			p = j
		}
	}
	s.buckets[p] = 0
	s.nkeys--
	if len(s.buckets) > minBuckets && s.nkeys*8 < len(s.buckets)*3/2 {
		s.resize(len(s.buckets) / 2)
	}
}

// indexRange calls f with every key's slot.
func (s *shard) indexRange(f func(i int32)) {
	for _, v := range s.buckets {
		if v != 0 {
			f(int32(uint32(v)) - 1)
		}
	}
}
