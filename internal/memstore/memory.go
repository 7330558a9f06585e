package memstore

import "unsafe"

// What MaxBytes counts: what the Go allocator spends for a shard, not an
// estimate per key. A shard holds its pages of slots (entry, key area and
// deny instant, allocated a page at a time and never given back), the
// slice of its pages, its index, the chunks of its key arena, which hold
// the keys longer than inlineKey (arena.go), and each sliding log's header
// and ring. Every allocation is counted at the size the
// allocator gives it: its size class (runtime/sizeclasses.go), plus the
// 8-byte header a small object that holds pointers carries past 512 bytes,
// or a whole number of 8 KiB pages for a large one (over 32,760 bytes). A slot counts while
// its page is held, whether a key is in it or not, so a shard that once
// held many small keys has less room for long ones. An empty shard counts
// 0: its first 8 index buckets are its own fixed cost.

// sizeClasses are the Go runtime's size classes for small objects
// (internal/runtime/gc/sizeclasses.go, unchanged since Go 1.21).
var sizeClasses = [...]uint16{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

const (
	maxSmall      = 32768 // the largest small object
	mallocHeader  = 8     // the header of a small object with pointers over minForHeader bytes
	minForHeader  = 512
	runtimePage   = 8192
	pageStructLen = int64(unsafe.Sizeof(page{}))
)

// allocBytes is what the allocator spends on an object of n bytes (n > 0);
// scan tells whether it holds pointers.
func allocBytes(n int64, scan bool) int64 {
	if n <= 0 {
		return 0
	}
	if n > maxSmall-mallocHeader { // a large object: its type is in its span
		return (n + runtimePage - 1) &^ (runtimePage - 1)
	}
	if scan && n > minForHeader {
		n += mallocHeader
	}
	lo, hi := 0, len(sizeClasses)-1 // the first class of at least n
	for lo < hi {
		if m := (lo + hi) / 2; int64(sizeClasses[m]) >= n {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return int64(sizeClasses[lo])
}

// pageBytes is what a page of n slots takes.
func pageBytes(n int) int64 {
	return allocBytes(int64(n)*int64(unsafe.Sizeof(entry{})), true) +
		allocBytes(int64(n)*inlineKey, false) + allocBytes(int64(n)*8, false)
}

// layoutBytes is what the shard's pages, their slice, its index and its
// key arena take.
func (s *shard) layoutBytes() int64 {
	b := allocBytes(int64(cap(s.pages))*pageStructLen, true) + allocBytes(int64(len(s.buckets))*8, false) + s.keys.bytes + s.logs.bytes
	for i := range s.pages {
		b += pageBytes(len(s.pages[i].e))
	}
	return b
}

// growBytes is what handing out a new slot (s.used) would add to the
// layout: a page, or the first page's growth, or nothing.
func (s *shard) growBytes() int64 {
	switch p := int(s.used >> pageShift); {
	case p == len(s.pages):
		n := pageSize
		if p == 0 {
			n = firstPage
		}
		b := pageBytes(n)
		if len(s.pages) == cap(s.pages) {
			b += allocBytes(int64(2*cap(s.pages)+1)*pageStructLen, true) - allocBytes(int64(cap(s.pages))*pageStructLen, true)
		}
		return b
	case p == 0 && int(s.used) == len(s.pages[0].e):
		return pageBytes(min(pageSize, len(s.pages[0].e)*3/2)) - pageBytes(len(s.pages[0].e))
	}
	return 0
}

// need is what inserting a key of n bytes would add to the shard's bytes.
func (s *shard) need(n int) int64 {
	var b int64
	if s.free == none {
		b += s.growBytes()
	}
	if (s.nkeys+1)*4 > len(s.buckets)*3 {
		b += allocBytes(int64(len(s.buckets))*16, false) - allocBytes(int64(len(s.buckets))*8, false)
	}
	if n > inlineKey {
		b += s.keys.need(recLen(n), s.maxBytes, s.maxBytes-s.bytes-b)
	}
	return b
}

// bytes is what a state holds beyond its slot and the key arena: its
// sliding log's header, if any (its ring of stamps is in the key arena).
func (st *state) bytes() int64 { return logBytes(st.logCap()) }

// logCap is the capacity of the state's log in stamp slots, or −1 if it
// has none.
func (st *state) logCap() int {
	if st.log == nil {
		return -1
	}
	return cap(st.log.buf)
}

// logBytes is what a log of c stamp slots takes beyond the slab of
// headers and the key arena, which count its header and its ring: nothing.
func logBytes(int) int64 { return 0 }
