package memstore

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit"
)

// entry is one key in a shard: 64 bytes, one cache line. Entries live in
// pages and are found through the shard's index by slot number; nothing
// links them to each other, so a hit writes only its own entry.
type entry struct {
	key   string // "" when the slot is free; its bytes are in its page's key area (see page) or, for a longer key, its shard's key arena (arena.go)
	tag   uint64 // algorithm<<56 | index<<idxShift | window in ms: the rule the state was recorded under and its index in AllowAll; dirtyBit: changed since the last Drain
	until int64  // ms from which the state no longer matters (it decides as an empty one)
	st    state
}

const (
	// A page holds 512 slots: its entries are then 32 KiB, a large object
	// the allocator gives exactly that. At 256, a small object with
	// pointers, they took 16 KiB and an 8-byte header, which the allocator
	// rounds up to 18 KiB: 8 bytes a slot spent on nothing.
	pageShift = 9
	pageSize  = 1 << pageShift // entries a page holds; the first page starts at firstPage and grows by half
	firstPage = 8
	none      = -1

	// slotBytes is what a slot takes in its page: its 64-byte entry, its
	// key area and its deny instant (see memory.go for what else counts).
	slotBytes = 64 + inlineKey + 8
	// inlineKey is the longest key kept in its page's key area (see page).
	// 16 bytes is what a heap copy of such a key took before: short keys
	// cost no more for being inline, and a longer one pays these 16 unused
	// bytes beside its record in the key arena.
	inlineKey = 16
	// evictSample is how many keys an eviction compares (Redis samples 5).
	evictSample = 5
)

// shard is a bounded map from key to state behind one mutex.
//
// Its size is a whole number of cache lines, so in the Limiter's array every
// shard starts a line of its own (a large allocation starts a page): the
// fields a decision reads fill its first three lines, and no two shards'
// locks share a line.
type shard struct {
	mu      sync.Mutex
	buckets []uint64 // the index from key to slot (index.go)
	pages   []page
	seed    uint32 // random: keys cannot be crafted to share a home bucket
	shift   uint8  // 32 − log2(len(buckets)): a fragment's home bucket is mix(frag)>>shift
	track   bool   // record changed slots for Drain

	rule ringlimit.Rule // the last rule validated here, and its params
	p    params

	dirty, spare []int32     // slots changed since the last Drain (some may since have been freed or reused)
	holes        holeRecords // the buckets' cancelled reservations that could not come back yet (holes.go)
	floors       floors      // the leased token buckets' floors (floor.go)
	l            *Limiter
	nkeys        int
	used         int32 // slots ever handed out; slots below it are in use or on the free list
	free         int32 // free list head (linked through until)
	max          int32 // capacity in keys
	hand         int32 // cursor of the sweep and of eviction's samples
	bytes        int64 // what the keys hold, as MaxBytes counts it
	maxBytes     int64
	removes      uint64 // slots freed so far: a slot found before is still the key's if it has not changed

	evicted, evictedLive, evictedDenying, expired uint64

	// recent are the last slots handed to a new key, recent[rc&3] the
	// oldest: eviction looks at them first, so among keys that deny (and
	// among equals) the newest go first (see evict).
	recent [4]int32
	rc     uint8

	// multi are the last rules validated here at each index of AllowAll,
	// and their params.
	multi [ringlimit.MaxRules]struct {
		rule ringlimit.Rule
		p    params
	}

	keys keyArena // the bytes of keys longer than inlineKey
	logs logSlab  // the headers of the sliding logs held

	_ [32]byte // to a whole number of cache lines
}

// A shard is a whole number of cache lines (see shard).
var _ [0]struct{} = [unsafe.Sizeof(shard{}) % 64]struct{}{}

func (s *shard) init(max int32, maxBytes int64, l *Limiter) {
	s.initIndex()
	s.l = l
	s.free, s.max, s.maxBytes = none, max, maxBytes
	s.bytes = 0 // the empty index is the shard's, not its keys': layout changes count from here
	s.recent = [4]int32{none, none, none, none}
	s.keys.cur = none
}

// page is a run of slots: their entries, and beside them their key area,
// which holds the bytes of each key of at most inlineKey bytes. A lookup
// compares a short key there, at an address it knows from the slot alone,
// so the load of the key's bytes overlaps that of its entry instead of
// waiting for the entry's pointer to them: at a million keys, one cache
// miss less on the path of a decision. A short key's entry.key points into
// the key area, so it changes when the slot is reused: it is copied before
// it leaves the shard's lock (see entry.keyOut).
type page struct {
	e []entry
	k [][inlineKey]byte
	// deny is, per slot, the instant (ms) until which its state denies a
	// hit, as its last decision that left it exhausted found (0: none). It
	// is written only then, and read only by eviction: a key's entry stays
	// one cache line, and a decision that leaves room writes nothing here.
	deny []int64
}

func (s *shard) at(i int32) *entry { return &s.pages[i>>pageShift].e[i&(pageSize-1)] }

// is reports whether slot i holds key's state at index idx.
func (s *shard) is(i int32, key string, idx uint64) bool {
	pg := &s.pages[i>>pageShift]
	j := i & (pageSize - 1)
	e := &pg.e[j]
	return e.tag&idxMask == idx<<idxShift && len(e.key) == len(key) && pg.keyIs(j, e, key)
}

// keyIs reports whether e, the entry of slot j of the page, holds key, of
// the same length as e.key.
func (pg *page) keyIs(j int32, e *entry, key string) bool {
	if len(key) <= inlineKey {
		return unsafe.String(&pg.k[j][0], len(key)) == key
	}
	return e.key == key
}

// hold is the key string slot i keeps for key: a view of its key area for
// a short key, else of its record in the key arena (never the caller's
// string, which may pin a larger buffer).
func (s *shard) hold(i int32, key string) string {
	if len(key) > inlineKey {
		return s.store(i, key)
	}
	k := &s.pages[i>>pageShift].k[i&(pageSize-1)]
	copy(k[:], key)
	return unsafe.String(&k[0], len(key))
}

// inKeyArea reports whether slot i's key string is a view of its key area.
func (s *shard) inKeyArea(i int32) bool {
	e := s.at(i)
	return e.key != "" && len(e.key) <= inlineKey && unsafe.StringData(e.key) == &s.pages[i>>pageShift].k[i&(pageSize-1)][0]
}

// keyOut is slot i's key as it may leave the shard's lock: a short key's
// bytes are copied out of the key area, where the slot's next key would
// overwrite them; a key's bytes in the key arena never change.
func (s *shard) keyOut(i int32) string {
	if k := s.at(i).key; s.inKeyArea(i) {
		return strings.Clone(k)
	}
	return s.at(i).key
}

// keepKey is keyOut for a caller that hands the key out again and again
// (Drain): a short key's copy goes to the key arena and its entry points
// at it, so the next costs nothing. The key area still holds the bytes
// lookups compare.
func (s *shard) keepKey(i int32) string {
	if s.inKeyArea(i) {
		e := s.at(i)
		before := s.keys.bytes
		e.key = s.store(i, e.key)
		s.bytes += s.keys.bytes - before
	}
	return s.at(i).key
}

// remove drops the key in slot i and frees the slot.
func (s *shard) remove(i int32) {
	e := s.at(i)
	s.indexDel(i)
	s.removes++
	if e.key != "" && !s.inKeyArea(i) { // its bytes are in the key arena
		before := s.keys.bytes
		s.drop(e.key)
		s.bytes += s.keys.bytes - before
	}
	s.dropLog(i)
	s.bytes -= e.st.bytes() // the slot stays, free
	*e = entry{until: int64(s.free)}
	s.free = i
}

// next advances the hand over the slots handed out and returns its slot.
func (s *shard) next() int32 {
	if s.hand >= s.used {
		s.hand = 0
	}
	i := s.hand
	s.hand++
	return i
}

// sweep drops the keys whose state no longer matters among the next two
// slots under the hand. Called on each insert, so expiry costs no goroutine
// or timer and keeps pace with the keys that come in.
func (s *shard) sweep(now int64) {
	for range 2 {
		if s.used == 0 {
			return
		}
		if i := s.next(); s.at(i).key != "" && s.at(i).until <= now {
			s.remove(i)
			s.expired++
		}
	}
}

// cost estimates the hits a key's loss would admit again at now: 0 for a
// state that no longer matters, else the hits it holds now, at least 1. It
// needs no rule: a bucket's level drains linearly to nothing at until.
func (e *entry) cost(now int64) int64 {
	if e.until <= now {
		return 0
	}
	w := int64(e.tag & (1<<48 - 1))
	var used float64
	switch ringlimit.Algorithm(e.tag >> 56) {
	case ringlimit.TokenBucket, ringlimit.LeakyBucket:
		if e.until > e.st.b {
			used = float64(e.st.a) / float64(w) * float64(e.until-max(now, e.st.b)) / float64(e.until-e.st.b)
		}
	case ringlimit.FixedWindow:
		used = float64(e.st.b)
	case ringlimit.SlidingWindow:
		switch idx := floorDiv(now, w); {
		case idx <= e.st.a:
			used = float64(e.st.b) + float64(e.st.c)*float64(w-(now-idx*w))/float64(w)
		case idx == e.st.a+1:
			used = float64(e.st.b) * float64(w-(now-idx*w)) / float64(w)
		}
	case ringlimit.SlidingLog:
		if e.st.log != nil {
			used = float64(e.st.log.total)
		}
	}
	return max(1, int64(math.Ceil(used)))
}

// denyAt is slot i's deny instant (see page).
func (s *shard) denyAt(i int32) *int64 { return &s.pages[i>>pageShift].deny[i&(pageSize-1)] }

// denying reports whether slot i's state denies a hit at now.
func (s *shard) denying(i int32, now int64) bool {
	return *s.denyAt(i) > now && s.at(i).until > now
}

// exhausted records, for slot i, whose state (under a rule of algorithm alg
// and params p) left d with nothing remaining at now, until when it denies
// a hit: d's RetryAfter if d is a denial of one hit, else admitsOneAt.
func (s *shard) exhausted(i int32, d *ringlimit.Decision, alg ringlimit.Algorithm, p *params, now, n int64) {
	e := s.at(i)
	var at int64
	if !d.Allowed && n == 1 {
		at = now + int64(d.RetryAfter/time.Millisecond) // RetryAfter is whole ms
	} else {
		at = admitsOneAt(&e.st, alg, p, now)
	}
	*s.denyAt(i) = min(e.until, at)
}

// rank orders the states eviction may drop, lowest first: a state that no
// longer matters (0); then one that still admits a hit, by the hits its
// loss would admit again (its cost, at least 1); last, one that denies, and
// among those a recent insert (recent, its place among them, newest 0)
// before any other, which goes by its cost.
func (s *shard) rank(i int32, now int64, recent int) int64 {
	c := s.at(i).cost(now)
	if c == 0 || !s.denying(i, now) {
		return c
	}
	if recent >= 0 {
		return 1<<62 + int64(recent)
	}
	return 1<<62 + 1<<8 + min(c, 1<<52)
}

// evict drops one state of a key other than keep to make room: of the
// next evictSample states under the hand, the lowest ranked (see rank), the
// first seen of equals. If every one of them denies, the states last
// inserted are looked at too, newest first, and one of them goes if it
// denies too (or admits). It reports whether it found one. (Sparing every
// state of keep, not one slot, keeps AllowAll from evicting the states of
// the key it is deciding.)
//
// A key that denies goes only when every state looked at denies: the
// limiter is then full of exhausted keys, and a flood of keys exhausted in
// turn replaces its own newest ones before it reaches the keys that were
// there before it.
func (s *shard) evict(now int64, keep string) bool {
	best, bestRank := int32(none), int64(math.MaxInt64)
	for seen, tries := 0, 0; seen < evictSample && tries < 4*evictSample && s.used > 0; tries++ {
		i := s.next()
		if e := s.at(i); e.key != "" && e.key != keep {
			seen++
			if c := s.rank(i, now, -1); c < bestRank {
				best, bestRank = i, c
				if c == 0 {
					break
				}
			}
		}
	}
	for r := 0; r < len(s.recent) && bestRank >= 1<<62; r++ {
		i := s.recent[(int(s.rc)-1-r)&(len(s.recent)-1)]
		if i < 0 || i >= s.used {
			continue
		}
		if e := s.at(i); e.key != "" && e.key != keep {
			if c := s.rank(i, now, r); c < bestRank {
				best, bestRank = i, c
			}
		}
	}
	if best == none {
		return false
	}
	s.evicted++
	if bestRank > 0 {
		s.evictedLive++
	}
	if bestRank >= 1<<62 {
		s.evictedDenying++
	}
	s.remove(best)
	return true
}

// shed evicts states of keys other than keep until the shard is within its
// bytes.
func (s *shard) shed(now int64, keep string) {
	for s.bytes > s.maxBytes && s.evict(now, keep) {
	}
}

// insert adds key's state at index idx (not present; frag is the key's
// index fragment), evicting states of other keys if the shard is full, and
// returns its slot.
func (s *shard) insert(key string, frag uint32, idx uint64, now int64) int32 {
	s.sweep(now)
	for s.nkeys >= int(s.max) || s.bytes+s.need(len(key)) > s.maxBytes {
		if !s.evict(now, key) {
			break
		}
	}
	var i int32
	if s.free != none {
		i = s.free
		s.free = int32(s.at(i).until)
	} else {
		i = s.used
		s.used++
		s.grow(i)
	}
	s.indexPut(frag, i) // first: a key's chunk may take what room is left (see keyArena.newChunkLen)
	e := s.at(i)
	before := s.keys.bytes
	*e = entry{key: s.hold(i, key), tag: idx << idxShift}
	s.bytes += s.keys.bytes - before
	*s.denyAt(i) = 0
	s.recent[s.rc&3] = i
	s.rc++
	return i
}

// grow makes room for slot i, the next one handed out: a new page, or a
// larger first page (small shards stay small).
func (s *shard) grow(i int32) {
	p := int(i >> pageShift)
	if p < len(s.pages) && (p > 0 || int(i) < len(s.pages[0].e)) {
		return
	}
	before := s.layoutBytes()
	defer func() { s.bytes += s.layoutBytes() - before }()
	switch {
	case p == len(s.pages):
		n := pageSize
		if p == 0 {
			n = firstPage
		}
		s.pages = append(s.pages, page{make([]entry, n), make([][inlineKey]byte, n), make([]int64, n)})
	case p == 0 && int(i) == len(s.pages[0].e):
		// By half again, not twice: a shard that stops at a few hundred
		// keys leaves fewer slots unused (at 10k keys in 64 shards, 46
		// rather than 100 each, 23 rather than 51 bytes a key).
		old := s.pages[0]
		n := min(pageSize, len(old.e)*3/2)
		pg := page{make([]entry, n), make([][inlineKey]byte, n), make([]int64, n)}
		copy(pg.e, old.e)
		copy(pg.k, old.k)
		copy(pg.deny, old.deny)
		for j := range old.e { // short keys point into the new key area
			if e := &pg.e[j]; s.inKeyArea(int32(j)) {
				e.key = unsafe.String(&pg.k[j][0], len(e.key))
			}
		}
		s.pages[0] = pg
	}
}

// apply decides n hits on key (fragment frag) under rule at now, under the
// shard's lock, and records them if n > 0 and they are admitted; n == 0 is a
// peek. A key that is absent, or whose state was recorded under another
// algorithm or window, decides as an empty state; it is written only if hits
// are recorded. It uses the key's state at index 0.
//
// It writes the Decision through d, which saves a copy of it per call.
//
// If held is set, a key that holds no state that still matters decides
// nothing: apply reports false (and nil), unless the gate opens under the
// lock (see AllowNIfAt).
func (s *shard) apply(d *ringlimit.Decision, key string, frag uint32, rule ringlimit.Rule, now, n int64, held bool, gate Gate) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rule != s.rule || s.p.window == 0 {
		// Validated once per shard and rule: a call under the rule the
		// previous call used skips the checks and the conversions.
		if err := rule.Validate(); err != nil {
			return false, err
		}
		s.rule, s.p = rule, paramsOf(rule)
	}
	if uint64(n) > uint64(s.p.burst) { // n < 0 or over the capacity
		return false, ringlimit.ValidateCall(key, rule, n)
	}
	consume := n > 0
	if !consume {
		n = 1
	}
	i, ok := s.lookup(key, frag, 0)
	if ok && rule.Algorithm != ringlimit.SlidingLog {
		// The common case: a key that holds a live state under this rule,
		// which keeps no log (its bytes cannot change), decides in place.
		if e := s.at(i); e.tag&^dirtyBit == tagOf(rule.Algorithm, 0, &s.p) && e.until > now {
			var keep int64 // (until when a leased bucket's floor keeps it: floor.go)
			if rule.Algorithm == ringlimit.TokenBucket && s.hasFloors() {
				keep = s.floorAt(key, e.tag&^dirtyBit, &e.st, &s.p, now)
			}
			until := decide(d, &e.st, rule.Algorithm, &s.p, now, n, consume)
			if consume && d.Allowed {
				e.until = max(until, keep)
				if s.track && e.tag&dirtyBit == 0 {
					e.tag |= dirtyBit
					s.dirty = append(s.dirty, i)
				}
			}
			if d.Remaining == 0 {
				s.exhausted(i, d, rule.Algorithm, &s.p, now, n)
			}
			return true, nil
		}
	}
	if held && (!ok || s.at(i).until <= now) && !gate.open() {
		return false, nil
	}
	s.decideAt(d, key, frag, i, ok, 0, rule.Algorithm, &s.p, now, n, consume)
	return true, nil
}

// decideAt decides n hits on key's state at index idx, which lookup found in
// slot i if ok, and records them if consume is set and they are admitted
// (the caller holds the lock; see apply).
func (s *shard) decideAt(d *ringlimit.Decision, key string, frag uint32, i int32, ok bool, idx uint64, alg ringlimit.Algorithm, p *params, now, n int64, consume bool) {
	tag := tagOf(alg, idx, p)
	var fresh state
	st := &fresh
	var e *entry
	if ok {
		e = s.at(i)
		// A state past its until is gone, as it is in Valkey once its TTL
		// runs out, whether or not a sweep has dropped it yet. (Under the
		// same rule it would decide as an empty state anyway; under a new
		// Limit or Burst it must not linger.)
		if e.tag&^dirtyBit == tag && e.until > now {
			st = &e.st
		}
	}
	old := st.logCap() // a log's bytes change only with its capacity: no count on the way
	var ring []uint64  // the log's ring before, in the key arena
	if st.log != nil {
		ring = st.log.buf
	}
	var keep int64
	if idx == 0 && alg == ringlimit.TokenBucket && s.hasFloors() {
		keep = s.floorAt(key, tag, st, p, now) // (a state started afresh too: it starts at the floor)
	}
	until := max(decide(d, st, alg, p, now, n, consume), keep)
	if consume && d.Allowed {
		if !ok {
			i = s.insert(key, frag, idx, now)
			e = s.at(i)
		}
		if st == &fresh {
			s.dropLog(i)
			old = e.st.logCap()
			e.st, e.tag = fresh, tag
			*s.denyAt(i) = 0 // the state it denied by is gone
		}
		e.until = until
		if l := e.st.log; l != nil && (l.slab == 0 || len(l.buf) > 0 && (len(ring) == 0 || &ring[0] != &l.buf[0])) {
			s.settleRing(i, ring, now, key) // a new log, or a ring that grew
		}
		if c := e.st.logCap(); c != old {
			s.bytes += logBytes(c) - logBytes(old)
			s.shed(now, key)
		}
		if s.track && e.tag&dirtyBit == 0 {
			e.tag |= dirtyBit
			s.dirty = append(s.dirty, i)
		}
	}
	if d.Remaining == 0 && e != nil && e.tag&^dirtyBit == tag && e.until > now {
		s.exhausted(i, d, alg, p, now, n)
	}
}

// applyAll decides n hits on key under every rule, rules[i] on the key's
// state at index i, under the shard's lock: if every rule admits them and
// n > 0, every state records them; else none changes (n == 0 peeks). ds has
// len(rules) elements, 1 to ringlimit.MaxRules (the caller checked).
//
// If held is set, a key that holds no state that still matters at any of
// the rules' indexes decides nothing: applyAll reports false (and nil),
// unless the gate opens under the lock (see apply).
func (s *shard) applyAll(ds []ringlimit.Decision, key string, frag uint32, rules []ringlimit.Rule, now, n int64, held bool, gate Gate) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var slots [ringlimit.MaxRules]int32
	var es [ringlimit.MaxRules]*entry
	s.lookupAll(key, frag, len(rules), &slots, &es)
	if held {
		live := false
		for j := range rules {
			if e := es[j]; e != nil && e.until > now {
				live = true
				break
			}
		}
		if !live && !gate.open() {
			return false, nil
		}
	}
	for j, r := range rules {
		m := &s.multi[j]
		if r != m.rule || m.p.window == 0 {
			if err := r.Validate(); err != nil {
				return false, fmt.Errorf("rules[%d]: %w", j, err)
			}
			m.rule, m.p = r, paramsOf(r)
		}
		if uint64(n) > uint64(m.p.burst) {
			return false, fmt.Errorf("rules[%d]: %w", j, ringlimit.ValidateCall(key, r, n))
		}
	}
	consume := n > 0
	if !consume {
		n = 1
	}
	// A leased token bucket at index 0 (AllowN's state) decides on its
	// state settled to its floor (floor.go), in place if it is live, else
	// on the general path's copy (inPlace would start it from empty).
	floor0 := rules[0].Algorithm == ringlimit.TokenBucket && s.hasFloors()
	var keep0 int64
	fast := true
	if floor0 {
		tag := tagOf(ringlimit.TokenBucket, 0, &s.multi[0].p)
		if e := es[0]; e != nil && e.until > now && e.tag&^dirtyBit == tag {
			keep0 = s.floorAt(key, tag, &e.st, &s.multi[0].p, now)
		} else if f, ok := s.floors.m[key]; ok && f.tag == tag {
			fast = false
		}
	}
	if consume && fast && !s.l.hooks.skipFast() && s.inPlace(ds, rules, &slots, &es, now, n) {
		s.l.hooks.decidedFast()
		if e := es[0]; keep0 != 0 && ds[0].Allowed {
			e.until = max(e.until, keep0)
		}
		s.exhaustedAll(ds, key, frag, rules, now)
		return true, nil
	}
	// Each rule decides on a copy of its state as if it recorded the hits
	// (a sliding log, whose stamps the copy would share, only peeks, unless
	// it is the last rule and the others admitted). If every rule admits,
	// the copies are recorded and the logs decide again, recording; else
	// each rule that admitted decides again on its state without
	// recording, to report what it has left now (a denial is the same
	// either way). All of it at the same instant under the lock, so a rule
	// decides alike each time. k rules without logs cost k decisions when
	// they all admit, and one pass over the key's probe run.
	var sts [ringlimit.MaxRules]state
	var untils [ringlimit.MaxRules]int64
	all, last, removes := true, len(rules)-1, s.removes
	for j, r := range rules {
		if j == last && all && consume && r.Algorithm == ringlimit.SlidingLog {
			// The last rule, after every other admitted: a log records at
			// once if it admits too (a denial writes nothing), rather than
			// peek and decide again.
			i := slots[j]
			s.decideAt(&ds[j], key, frag, i, i != none, uint64(j), r.Algorithm, &s.multi[j].p, now, n, true)
			all = ds[j].Allowed
			break
		}
		st, tag := &sts[j], tagOf(r.Algorithm, uint64(j), &s.multi[j].p)
		if i := slots[j]; i != none {
			if e := s.at(i); e.tag&^dirtyBit == tag && e.until > now {
				if r.Algorithm == ringlimit.SlidingLog {
					st = &e.st // a peek: not written
				} else {
					st.a, st.b, st.c = e.st.a, e.st.b, e.st.c
				}
			}
		}
		if j == 0 && floor0 {
			keep0 = max(keep0, s.floorAt(key, tag, st, &s.multi[0].p, now))
		}
		untils[j] = decide(&ds[j], st, r.Algorithm, &s.multi[j].p, now, n, consume && r.Algorithm != ringlimit.SlidingLog)
		if j == 0 {
			untils[0] = max(untils[0], keep0)
		}
		all = all && ds[j].Allowed
	}
	if !consume {
		s.exhaustedAll(ds, key, frag, rules, now)
		return true, nil
	}
	if !all {
		for j, r := range rules {
			if ds[j].Allowed && r.Algorithm != ringlimit.SlidingLog {
				i := slots[j]
				s.decideAt(&ds[j], key, frag, i, i != none, uint64(j), r.Algorithm, &s.multi[j].p, now, n, false)
			}
		}
		s.exhaustedAll(ds, key, frag, rules, now)
		return true, nil
	}
	for j, r := range rules {
		i := slots[j]
		if s.removes != removes { // an insert made room: slots may have been freed
			i, _ = s.lookup(key, frag, uint64(j))
		}
		if r.Algorithm == ringlimit.SlidingLog {
			if j == last {
				break // recorded above
			}
			s.decideAt(&ds[j], key, frag, i, i != none, uint64(j), r.Algorithm, &s.multi[j].p, now, n, true)
		} else {
			s.record(key, frag, i, uint64(j), tagOf(r.Algorithm, uint64(j), &s.multi[j].p), &sts[j], untils[j], now)
		}
	}
	s.exhaustedAll(ds, key, frag, rules, now)
	return true, nil
}

// exhaustedAll records, for each of key's states at the rules' indexes
// whose decision in ds left nothing remaining, until when it denies (see
// exhausted). It costs a test per rule when every rule left room.
func (s *shard) exhaustedAll(ds []ringlimit.Decision, key string, frag uint32, rules []ringlimit.Rule, now int64) {
	for j, r := range rules {
		if ds[j].Remaining != 0 {
			continue
		}
		p := &s.multi[j].p
		if i, ok := s.lookup(key, frag, uint64(j)); ok {
			if e := s.at(i); e.tag&^dirtyBit == tagOf(r.Algorithm, uint64(j), p) && e.until > now {
				s.exhausted(i, &ds[j], r.Algorithm, p, now, 0)
			}
		}
	}
}

// inPlace is applyAll's common case, n > 0 hits on a key whose every state
// at the rules' indexes (es) is here and keeps no log, each live under its
// rule or no longer mattering: each rule decides on a copy of its state (an
// empty one for a state that no longer matters, which decides as one), as
// if recording, and if every rule admits, the copies are written back, as
// AllowN's own fast path writes its one state: no insert, no second
// decision. If a rule denies, nothing was written, and every rule peeks at
// its state (or an empty one) to report what it has left. It reports
// false, having decided nothing, for any other key.
//
// A state that no longer matters at now is written only if every rule
// admits: a call at an earlier instant (a clock that went back, or a caller
// that read the clock before another took the lock) must still find it.
func (s *shard) inPlace(ds []ringlimit.Decision, rules []ringlimit.Rule, slots *[ringlimit.MaxRules]int32, es *[ringlimit.MaxRules]*entry, now, n int64) bool {
	for j, r := range rules {
		e := es[j]
		if e == nil || r.Algorithm == ringlimit.SlidingLog || e.st.log != nil {
			return false // a log's bytes may change
		}
		if e.until > now && e.tag&^dirtyBit != tagOf(r.Algorithm, uint64(j), &s.multi[j].p) {
			return false // a live state under another rule is kept
		}
	}
	var cp [ringlimit.MaxRules]state
	var untils [ringlimit.MaxRules]int64
	for j, r := range rules {
		if e := es[j]; e.until > now {
			cp[j].a, cp[j].b, cp[j].c = e.st.a, e.st.b, e.st.c
		}
		untils[j] = decide(&ds[j], &cp[j], r.Algorithm, &s.multi[j].p, now, n, true)
		if !ds[j].Allowed {
			for m, r := range rules {
				st := &es[m].st
				if es[m].until <= now {
					cp[m] = state{}
					st = &cp[m]
				}
				decide(&ds[m], st, r.Algorithm, &s.multi[m].p, now, n, false)
			}
			return true
		}
	}
	for j, r := range rules {
		e := es[j]
		e.st.a, e.st.b, e.st.c = cp[j].a, cp[j].b, cp[j].c
		e.tag, e.until = tagOf(r.Algorithm, uint64(j), &s.multi[j].p)|e.tag&dirtyBit, untils[j]
		if s.track && e.tag&dirtyBit == 0 {
			e.tag |= dirtyBit
			s.dirty = append(s.dirty, slots[j])
		}
	}
	return true
}

// tagOf is the tag of a state at index idx under a rule of algorithm alg
// and params p.
func tagOf(alg ringlimit.Algorithm, idx uint64, p *params) uint64 {
	return uint64(alg)<<56 | idx<<idxShift | uint64(p.window)
}

// record writes st, which admitted hits under tag and matters until until,
// as key's state at index idx, in slot i (none: not held, inserted here).
// st is not a sliding log's: it holds no log.
func (s *shard) record(key string, frag uint32, i int32, idx, tag uint64, st *state, until, now int64) {
	if i == none {
		i = s.insert(key, frag, idx, now)
	}
	e := s.at(i)
	if e.st.log != nil { // the slot's state was a sliding log's
		s.dropLog(i)
		s.bytes -= e.st.bytes()
		e.st.log = nil
	}
	if e.tag&^dirtyBit != tag {
		*s.denyAt(i) = 0 // the state it denied by, under another rule, is gone
	}
	e.st.a, e.st.b, e.st.c = st.a, st.b, st.c // the ints alone: no pointer write, no write barrier
	e.tag, e.until = tag|e.tag&dirtyBit, until
	if s.track && e.tag&dirtyBit == 0 {
		e.tag |= dirtyBit
		s.dirty = append(s.dirty, i)
	}
}

// lookupAll sets slots[j] to the slot of key's state at index j and es[j]
// to its entry, or none and nil, for j < k, in one pass over the key's
// probe run.
func (s *shard) lookupAll(key string, frag uint32, k int, slots *[ringlimit.MaxRules]int32, es *[ringlimit.MaxRules]*entry) {
	for j := range k {
		slots[j], es[j] = none, nil
	}
	mask := uint32(len(s.buckets) - 1)
	for p, found := s.home(frag), 0; ; p = (p + 1) & mask {
		v := s.buckets[p]
		if v == 0 {
			return
		}
		if uint32(v>>32) == frag {
			i := int32(uint32(v)) - 1
			pg, j := &s.pages[i>>pageShift], i&(pageSize-1)
			e := &pg.e[j]
			if idx := int(e.tag & idxMask >> idxShift); idx < k && es[idx] == nil && len(e.key) == len(key) && pg.keyIs(j, e, key) {
				slots[idx], es[idx] = i, e
				if found++; found == k {
					return
				}
			}
		}
	}
}

// reset forgets every state of key.
func (s *shard) reset(key string, frag uint32) {
	s.mu.Lock()
	var slots [ringlimit.MaxRules]int32
	var es [ringlimit.MaxRules]*entry
	s.lookupAll(key, frag, ringlimit.MaxRules, &slots, &es)
	for _, i := range slots {
		if i != none {
			s.remove(i)
		}
	}
	s.holes.forget(key)
	s.forgetFloor(key) // (the node revokes the key's leases: they were the state's before)
	s.mu.Unlock()
}
