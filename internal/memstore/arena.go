package memstore

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// The bytes of the keys longer than inlineKey, and the rings of stamps of
// the sliding logs, live in their shard's key arena, not in a heap object
// each. A heap object per key is one of its size class, and a flood of
// keys that come and go leaves the spans of those classes part used:
// after GC the heap in use (HeapInuse) grew to 1.1–2.6 × MaxBytes (1.9 ×
// under sliding logs), while what MaxBytes counted stayed within it. The
// arena's chunks are what the shard allocates for them, and MaxBytes
// counts them whole, the room in them that no record holds included: the
// heap in use is what MaxBytes counts. (The logs' headers live in a slab
// of their own, logSlab, for the same reason.)
//
// A chunk is a run of records handed out from its start, each at a
// multiple of 8: an 8-byte header (the slot that holds it, or −(the
// record's length) once it has gone, and the chunk's number, with ringRec
// for a ring) and the key's bytes or the ring. A key's entry points at its
// bytes, a log at its ring. A key's bytes once written never change: a
// chunk is compacted by copying the records it holds into a new chunk
// that takes its place, and one whose records have all gone is given
// back, never filled again. So a key's string may leave the shard's lock
// as it is (Range, Drain): whoever holds it keeps the old chunk alive,
// and MaxBytes no longer counts it. (A ring changes in place; it never
// leaves the lock.)
//
// When the chunk being filled has no room for a record, the chunk with the
// most room no record holds is compacted and filled next, if that room is
// at least an eighth of it; else a new chunk is allocated, of a size that
// grows with the arena, from 8 KiB to 64 KiB (or the record, if larger).
// So an eighth of a chunk or so is room no record holds, a compaction
// copies at most 7 bytes for each byte it frees, and the heap in use
// after GC is what the arena counts.

// keyArena is a shard's chunks of key bytes.
type keyArena struct {
	chunks []keyChunk
	cur    int32  // the chunk new keys go to (none: not yet one)
	bytes  int64  // what the chunks and their slice take, as allocBytes counts it
	moves  uint64 // chunks compacted so far (for tests)
}

// keyChunk is one chunk of key records.
type keyChunk struct {
	buf  []byte // nil: given back (its number is reused)
	used int32  // bytes handed out from buf's start
	live int32  // bytes of the records of keys held
}

const (
	recHeader   = 8
	minChunk    = runtimePage // holds the longest key's record
	maxChunk    = 64 << 10
	chunkStruct = int64(unsafe.Sizeof(keyChunk{}))
)

// recLen is the length of the record of n bytes: its header, the bytes, and
// up to 7 more, so that every record starts at a multiple of 8 (a chunk
// starts a span) and a sliding log's ring of stamps may be one.
func recLen(n int) int32 { return int32(recHeader+n+7) &^ 7 }

// ringRec marks, in a record's chunk number, a sliding log's ring of
// stamps (its slot's e.st.log.buf) rather than a key's bytes.
const ringRec = 1 << 31

// ceilPow2 is the least power of two at least n (n ≥ 1).
func ceilPow2(n int64) int64 { return 1 << bits.Len64(uint64(n-1)) }

// newChunkLen is the length of the chunk the arena would allocate next for
// a record of rec bytes in a shard of maxBytes that has room bytes left: a
// power of two from half of what the arena holds, or 4 records, up to 64
// KiB or a quarter of the shard; or if that is more than the room
// left, the most that room holds, or the least chunk if it holds less. So
// the last chunk that fits fills the shard, and one that does not fit
// makes eviction find the least room it needs. Each is a size whose
// object has its span to itself (see ownSpan).
func (a *keyArena) newChunkLen(rec int32, maxBytes, room int64) int64 {
	n := min(maxChunk, ceilPow2(max(a.bytes/2, 4*int64(rec))))
	n = ownSpan(max(min(n, maxBytes/4), int64(rec)))
	if n <= room {
		return n
	}
	return max(ownSpanIn(room), ownSpan(int64(rec)))
}

// ownSpan is the least size of at least n (n ≤ 1 MiB) whose object the
// allocator gives a span of its own, with no room to spare: a chunk shares
// no span with other objects, which could keep the span in use after the
// chunk is gone, or keep it in use with theirs. Of the small size classes,
// 8 KiB, 16 KiB, 24 KiB and 32 KiB have one object a span; a large object
// (over 32 KiB) takes whole 8 KiB pages.
func ownSpan(n int64) int64 {
	return max(minChunk, (n+runtimePage-1)&^(runtimePage-1))
}

// ownSpanIn is the largest such size at most n, or 0.
func ownSpanIn(n int64) int64 { return n &^ (runtimePage - 1) }

// plan says where a record of rec bytes would go: in chunk c, after
// compacting it if compact is set, or, if c is none, in a new chunk.
func (a *keyArena) plan(rec int32) (c int32, compact bool) {
	if a.cur != none {
		if ch := &a.chunks[a.cur]; int32(len(ch.buf))-ch.used >= rec {
			return a.cur, false
		}
	}
	best, room := int32(none), int32(0)
	for i := range a.chunks {
		ch := &a.chunks[i]
		if r := int32(len(ch.buf)) - ch.live; ch.buf != nil && r >= rec && r*8 >= int32(len(ch.buf)) && r > room {
			best, room = int32(i), r
		}
	}
	return best, best != none
}

// need is what storing a record of rec bytes would add to the arena's
// bytes, in a shard of maxBytes with room bytes left: a new chunk (and a
// longer slice of them), or nothing.
func (a *keyArena) need(rec int32, maxBytes, room int64) int64 {
	if c, _ := a.plan(rec); c != none {
		return 0
	}
	b := a.newChunkLen(rec, maxBytes, room)
	if a.hole() == none && len(a.chunks) == cap(a.chunks) {
		b += allocBytes(int64(2*cap(a.chunks)+1)*chunkStruct, true) - allocBytes(int64(cap(a.chunks))*chunkStruct, true)
	}
	return b
}

// hole is the number of a chunk given back, or none.
func (a *keyArena) hole() int32 {
	for i := range a.chunks {
		if a.chunks[i].buf == nil {
			return int32(i)
		}
	}
	return none
}

// header is the header of the record whose key bytes k points into a chunk.
func header(k string) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.StringData(k)), -recHeader)), recHeader)
}

// store copies key into a record for slot i and returns the string of its
// bytes there.
func (s *shard) store(i int32, key string) string {
	b := s.newRecord(i, len(key), 0)
	copy(b, key)
	return unsafe.String(&b[0], len(key))
}

// storeRing copies a sliding log's ring of stamps into a record for slot i
// and returns the ring there.
func (s *shard) storeRing(i int32, ring []uint64) []uint64 {
	b := s.newRecord(i, 8*len(ring), ringRec)
	r := unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(ring))
	copy(r, ring)
	return r
}

// newRecord hands out a record of n bytes for slot i, of kind (0 or ringRec),
// and returns its bytes.
func (s *shard) newRecord(i int32, n int, kind uint32) []byte {
	a := &s.keys
	rec := recLen(n)
	c, compact := a.plan(rec)
	switch {
	case compact:
		s.compact(c)
	case c == none:
		c = a.hole()
		n := a.newChunkLen(rec, s.maxBytes, s.maxBytes-s.bytes)
		a.bytes += n
		if c == none {
			old := int64(cap(a.chunks)) * chunkStruct
			a.chunks = append(a.chunks, keyChunk{})
			a.bytes += allocBytes(int64(cap(a.chunks))*chunkStruct, true) - allocBytes(old, true)
			c = int32(len(a.chunks) - 1)
		}
		a.chunks[c] = keyChunk{buf: make([]byte, n)}
	}
	a.cur = c
	ch := &a.chunks[c]
	at := ch.used
	ch.used += rec
	ch.live += rec
	binary.LittleEndian.PutUint32(ch.buf[at:], uint32(i))
	binary.LittleEndian.PutUint32(ch.buf[at+4:], uint32(c)|kind)
	return ch.buf[at+recHeader : at+recHeader+int32(n)]
}

// ringHeader is the header of the record that holds ring.
func ringHeader(ring []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&ring[0]), -recHeader)), recHeader)
}

// drop frees the record of k, a key's bytes in the arena; a chunk left
// with no record held is given back.
func (s *shard) drop(k string) { s.freeRecord(header(k), len(k)) }

// dropRing frees the record of a sliding log's ring.
func (s *shard) dropRing(ring []uint64) { s.freeRecord(ringHeader(ring), 8*len(ring)) }

// freeRecord frees the record of n bytes whose header is h.
func (s *shard) freeRecord(h []byte, n int) {
	a := &s.keys
	rec := recLen(n)
	binary.LittleEndian.PutUint32(h, uint32(-rec))
	c := int32(binary.LittleEndian.Uint32(h[4:]) &^ ringRec)
	ch := &a.chunks[c]
	if ch.live -= rec; ch.live > 0 {
		return
	}
	if c == a.cur {
		a.cur = none
	}
	a.bytes -= allocBytes(int64(len(ch.buf)), false)
	*ch = keyChunk{}
}

// compact copies chunk c's records of keys held into a new chunk of its
// size, which takes its number, and points their entries at their new
// places. The old chunk is not written again.
func (s *shard) compact(c int32) {
	ch := &s.keys.chunks[c]
	buf := make([]byte, len(ch.buf))
	to := int32(0)
	for at := int32(0); at < ch.used; {
		v := int32(binary.LittleEndian.Uint32(ch.buf[at:]))
		if v < 0 { // a key that went
			at -= v
			continue
		}
		e := s.at(v)
		var rec int32
		if binary.LittleEndian.Uint32(ch.buf[at+4:])&ringRec != 0 {
			l := e.st.log
			rec = recLen(8 * len(l.buf))
			copy(buf[to:], ch.buf[at:at+rec])
			l.buf = unsafe.Slice((*uint64)(unsafe.Pointer(&buf[to+recHeader])), len(l.buf))
		} else {
			rec = recLen(len(e.key))
			copy(buf[to:], ch.buf[at:at+rec])
			e.key = unsafe.String(&buf[to+recHeader], len(e.key))
		}
		to += rec
		at += rec
	}
	*ch = keyChunk{buf: buf, used: to, live: to}
	s.keys.moves++
}

// dropLog frees the ring of slot i's sliding log, if it has one, and its
// header, and keeps the bytes counted. The slot's state keeps no log.
func (s *shard) dropLog(i int32) {
	e := s.at(i)
	l := e.st.log
	if l == nil {
		return
	}
	if len(l.buf) > 0 {
		before := s.keys.bytes
		s.dropRing(l.buf)
		s.bytes += s.keys.bytes - before
	}
	if l.slab != 0 {
		s.logs.release(l)
	}
	e.st.log = nil
}

// settleRing moves the ring of slot i's sliding log into the key arena if
// a decision or an import just gave it one on the heap (a new log, or one
// that grew: before is the ring it had, freed then), evicting other keys'
// states first if the shard has no room for it.
func (s *shard) settleRing(i int32, before []uint64, now int64, key string) {
	e := s.at(i)
	l := e.st.log
	if l == nil {
		return
	}
	if l.slab == 0 { // a new log: its header goes to the slab
		for s.bytes+s.logs.needPage() > s.maxBytes && s.evict(now, key) {
		}
		b := s.logs.bytes
		l = s.logs.hold(l)
		e.st.log = l
		s.bytes += s.logs.bytes - b
	}
	if len(l.buf) == 0 || len(before) > 0 && &before[0] == &l.buf[0] {
		return
	}
	b := s.keys.bytes
	if len(before) > 0 {
		s.dropRing(before)
	}
	s.bytes += s.keys.bytes - b
	rec := recLen(8 * len(l.buf))
	for s.bytes+s.keys.need(rec, s.maxBytes, s.maxBytes-s.bytes) > s.maxBytes && s.evict(now, key) {
	}
	b = s.keys.bytes
	l.buf = s.storeRing(i, l.buf)
	s.bytes += s.keys.bytes - b
}

// logSlab holds the headers of a shard's sliding logs, in pages that each
// have a span to themselves, for the reason the key arena holds the keys:
// a header on the heap each, 64 bytes, left the spans of its size class
// part used as logs came and went. A page is never given back; a header
// that goes is kept for the next log.
type logSlab struct {
	pages [][]stampLog
	free  int32 // 1 + the first free header (they link through their n), or 0
	bytes int64 // what the pages and their slice take, as allocBytes counts it
}

// logsPerPage headers of 64 bytes and the allocator's 8-byte header of an
// object with pointers fill an 8 KiB object, which has its span to itself.
const logsPerPage = (runtimePage - mallocHeader) / logHeader

// logHeader is the size of a stampLog.
const logHeader = 64

var _ [0]struct{} = [unsafe.Sizeof(stampLog{}) - logHeader]struct{}{}

func (g *logSlab) at(j int32) *stampLog { return &g.pages[j/logsPerPage][j%logsPerPage] }

// needPage is what holding one more header would add to the slab's bytes.
func (g *logSlab) needPage() int64 {
	if g.free != 0 {
		return 0
	}
	b := allocBytes(logsPerPage*logHeader, true)
	if len(g.pages) == cap(g.pages) {
		b += allocBytes(int64(2*cap(g.pages)+1)*24, true) - allocBytes(int64(cap(g.pages))*24, true)
	}
	return b
}

// hold copies l into a free header of the slab and returns it.
func (g *logSlab) hold(l *stampLog) *stampLog {
	if g.free == 0 {
		old := cap(g.pages)
		g.pages = append(g.pages, make([]stampLog, logsPerPage))
		g.bytes += allocBytes(logsPerPage*logHeader, true) +
			allocBytes(int64(cap(g.pages))*24, true) - allocBytes(int64(old)*24, true)
		base := int32(len(g.pages)-1) * logsPerPage
		for j := range int32(logsPerPage) {
			g.at(base + j).n = int(base+j+1) + 1 // the next free, +1; the last links to the list (empty)
		}
		g.at(base + logsPerPage - 1).n = 0
		g.free = base + 1
	}
	j := g.free - 1
	h := g.at(j)
	g.free = int32(h.n)
	*h = *l
	h.slab = j + 1
	return h
}

// release returns a header held in the slab to its free list.
func (g *logSlab) release(h *stampLog) {
	j := h.slab - 1
	*h = stampLog{n: int(g.free)}
	g.free = j + 1
}
