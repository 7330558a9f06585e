package local

import (
	"hash/maphash"
	"strings"
	"sync"

	"github.com/ringlimit/ringlimit"
)

// entry is one key in a shard. Entries live in pages and point at each other
// by index, so the LRU list costs 8 bytes per key and the GC has few pointers
// to chase.
type entry struct {
	key        string // "" when the slot is free
	prev, next int32  // LRU list (head is the most recently used); next also links free slots
	tag        uint64 // algorithm<<56 | window in ms: the rule the state was recorded under; dirtyBit: changed since the last Drain
	until      int64  // ms from which the state no longer matters (it decides as an empty one)
	st         state
}

const (
	pageShift = 8
	pageSize  = 1 << pageShift
	none      = -1
)

// shard is a bounded LRU map from key to state behind one mutex.
type shard struct {
	mu      sync.Mutex
	seed    maphash.Seed
	buckets []uint64 // the index from key to slot (index.go)
	nkeys   int
	pages   [][]entry
	used    int32 // slots ever handed out; slots below it are in use or on the free list
	free    int32 // free list head
	head    int32 // most recently used
	tail    int32 // least recently used
	max     int32 // capacity
	hand    int32 // sweep cursor

	evicted, evictedLive, expired uint64

	track        bool    // record changed slots for Drain
	dirty, spare []int32 // slots changed since the last Drain (some may since have been freed or reused)

	_ [64]byte // keep neighbouring shards' locks off this cache line
}

func (s *shard) init(max int32, seed maphash.Seed) {
	s.initIndex(seed)
	s.free, s.head, s.tail, s.max = none, none, none, max
}

func (s *shard) at(i int32) *entry { return &s.pages[i>>pageShift][i&(pageSize-1)] }

func (s *shard) unlink(i int32) {
	e := s.at(i)
	if e.prev != none {
		s.at(e.prev).next = e.next
	} else {
		s.head = e.next
	}
	if e.next != none {
		s.at(e.next).prev = e.prev
	} else {
		s.tail = e.prev
	}
}

func (s *shard) pushFront(i int32) {
	e := s.at(i)
	e.prev, e.next = none, s.head
	if s.head != none {
		s.at(s.head).prev = i
	} else {
		s.tail = i
	}
	s.head = i
}

// touch marks i as the most recently used.
func (s *shard) touch(i int32) {
	if s.head != i {
		s.unlink(i)
		s.pushFront(i)
	}
}

// remove drops the key in slot i and frees the slot.
func (s *shard) remove(i int32) {
	e := s.at(i)
	s.indexDel(e.key)
	s.unlink(i)
	*e = entry{next: s.free}
	s.free = i
}

// sweep drops a few idle keys: the least recently used one and two more under
// a cursor that walks every slot in turn. Called on each insert, so expiry
// costs no goroutine or timer and keeps pace with the keys that come in.
func (s *shard) sweep(now int64) {
	if s.tail != none && s.at(s.tail).until <= now {
		s.remove(s.tail)
		s.expired++
	}
	for range 2 {
		if s.used == 0 {
			return
		}
		if s.hand >= s.used {
			s.hand = 0
		}
		if e := s.at(s.hand); e.key != "" && e.until <= now {
			s.remove(s.hand)
			s.expired++
		}
		s.hand++
	}
}

// insert adds key (not present) as the most recently used, evicting the least
// recently used key if the shard is full, and returns its slot.
func (s *shard) insert(key string, now int64) int32 {
	s.sweep(now)
	var i int32
	switch {
	case s.free != none:
		i = s.free
		s.free = s.at(i).next
	case s.used < s.max:
		i = s.used
		s.used++
		if int(i>>pageShift) == len(s.pages) {
			s.pages = append(s.pages, make([]entry, min(pageSize, s.max-i)))
		}
	default:
		i = s.tail
		if s.at(i).until > now {
			s.evictedLive++
		}
		s.evicted++
		s.remove(i)
		s.free = s.at(i).next
	}
	e := s.at(i)
	e.key = strings.Clone(key)
	s.indexPut(e.key, i)
	s.pushFront(i)
	return i
}

// apply decides n hits on key at now under the shard's lock, and records them
// if consume is set and they are admitted. A key that is absent, or whose
// state was recorded under another algorithm or window, decides as an empty
// state; it is written only if hits are recorded.
//
// If held is set, a key that holds no state that still matters decides
// nothing: apply returns false.
func (s *shard) apply(key string, h uint32, alg ringlimit.Algorithm, p params, now, n int64, consume, held bool) (ringlimit.Decision, bool) {
	tag := uint64(alg)<<56 | uint64(p.window)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.lookupHash(key, h)
	if held && (!ok || s.at(i).until <= now) {
		return ringlimit.Decision{}, false
	}
	var fresh state
	st := &fresh
	if ok {
		// A state past its until is gone, as it is in Valkey once its TTL
		// runs out, whether or not a sweep has dropped it yet. (Under the
		// same rule it would decide as an empty state anyway; under a new
		// Limit or Burst it must not linger.)
		if e := s.at(i); e.tag&^dirtyBit == tag && e.until > now {
			st = &e.st
		}
		s.touch(i)
	}
	d, until := decide(st, alg, p, now, n, consume)
	if consume && d.Allowed {
		if !ok {
			i = s.insert(key, now)
		}
		e := s.at(i)
		if st == &fresh {
			e.st, e.tag = fresh, tag
		}
		e.until = until
		if s.track && e.tag&dirtyBit == 0 {
			e.tag |= dirtyBit
			s.dirty = append(s.dirty, i)
		}
	}
	return d, true
}

func (s *shard) reset(key string) {
	s.mu.Lock()
	if i, ok := s.lookup(key); ok {
		s.remove(i)
	}
	s.mu.Unlock()
}
