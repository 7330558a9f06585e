package memstore

// The shard's index from key to slot: open addressing with linear probing,
// one uint64 per bucket (the key's 32-bit fragment and its slot + 1; 0 is
// empty), kept between 3/8 and 3/4 full. At 8 bytes a bucket that is 11–21
// bytes a key, and the key itself is stored once, in its entry.
//
// A key's fragment is the top 32 bits of its hash, and its home bucket is
// the top bits of a seeded mix of the fragment (see home).
// Not the fragment itself: node hashes keys by ring position, and a node
// holds only the keys of its own arcs, so in ring order they would crowd a
// quarter or less of the buckets into one long run. RangeArcs scans the
// buckets and reads each fragment, touching entries only of the keys in the
// arcs (arcs.go).

import "math/rand/v2"

const minBuckets = 8

func (s *shard) initIndex() {
	s.seed = rand.Uint32()
	s.buckets = make([]uint64, minBuckets)
	s.shift = 32 - 3
	s.nkeys = 0
}

// home is frag's home bucket: the top bits of a seeded mix of it (murmur3's
// finalizer, a bijection). Config.Hash is public and unseeded (node uses
// xxhash, as the ring does), so without the shard's random seed a client
// could choose keys whose fragments share a home and grow one probe run to
// thousands of buckets; with it, only keys that share all 32 bits of
// fragment collide, which costs about 2^32 hashes a key to find.
func (s *shard) home(frag uint32) uint32 {
	h := frag ^ s.seed
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h >> s.shift
}

// lookup returns the slot of key's state at index idx (see idxShift); key's
// fragment is frag. A key's states share its fragment, so they share a probe
// run: the index of a key that is used alone costs nothing.
func (s *shard) lookup(key string, frag uint32, idx uint64) (int32, bool) {
	mask := uint32(len(s.buckets) - 1)
	for p := s.home(frag); ; p = (p + 1) & mask {
		v := s.buckets[p]
		if v == 0 {
			return none, false
		}
		if uint32(v>>32) == frag {
			if i := int32(uint32(v)) - 1; s.is(i, key, idx) {
				return i, true
			}
		}
	}
}

// indexPut records that a key (absent) with fragment frag is in slot i.
func (s *shard) indexPut(frag uint32, i int32) {
	if (s.nkeys+1)*4 > len(s.buckets)*3 {
		s.resize(2 * len(s.buckets))
	}
	s.place(uint64(frag)<<32 | uint64(uint32(i+1)))
	s.nkeys++
}

func (s *shard) place(v uint64) {
	mask := uint32(len(s.buckets) - 1)
	p := s.home(uint32(v >> 32))
	for s.buckets[p] != 0 {
		p = (p + 1) & mask
	}
	s.buckets[p] = v
}

func (s *shard) resize(n int) {
	old := s.buckets
	s.buckets = make([]uint64, n)
	s.bytes += allocBytes(int64(n)*8, false) - allocBytes(int64(len(old))*8, false)
	s.shift = 32
	for m := n; m > 1; m >>= 1 {
		s.shift--
	}
	for _, v := range old {
		if v != 0 {
			s.place(v)
		}
	}
}

// indexDel forgets slot i, which is in the index; its entry still holds its
// key. The key's fragment is not stored, so it is hashed again: removal is
// rare next to lookups (an expiry, an eviction, a Reset).
func (s *shard) indexDel(i int32) {
	_, frag := s.l.locate(s.at(i).key)
	mask := uint32(len(s.buckets) - 1)
	for p := s.home(frag); ; p = (p + 1) & mask {
		v := s.buckets[p]
		if v == 0 {
			return // not there
		}
		if uint32(v>>32) == frag && int32(uint32(v))-1 == i {
			s.delAt(p)
			return
		}
	}
}

// delAt empties bucket p. Backward-shift deletion: move up every later
// bucket of the run whose home is not between the hole and itself, so no
// probe sequence breaks.
func (s *shard) delAt(p uint32) {
	mask := uint32(len(s.buckets) - 1)
	for j := (p + 1) & mask; s.buckets[j] != 0; j = (j + 1) & mask {
		home := s.home(uint32(s.buckets[j] >> 32))
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
