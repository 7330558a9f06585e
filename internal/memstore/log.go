package memstore

// stampLog is a sliding log: the stamps (ms) of admitted hits, oldest first,
// in a ring buffer. Hits admitted in the same millisecond share one 8-byte
// slot, offset<<32 | count, with the offset in ms from base. The buffer grows
// by doubling up to the rule's Limit (a log never holds more than Limit
// stamps), so a full log costs at most 8 bytes per stamp.
type stampLog struct {
	base  int64    // ms that offsets count from
	total int64    // stamps held, the sum of the counts
	head  int      // index of the oldest slot
	n     int      // slots in use
	buf   []uint64 // ring of offset<<32 | count; in its shard's key arena once held (see shard.settleRing)
	slab  int32    // 1 + its place in its shard's slab of headers, once held there; 0: on the heap
}

const maxSlotCount = 1<<32 - 1

func (l *stampLog) slot(i int) uint64 { return l.buf[(l.head+i)%len(l.buf)] }

func (l *stampLog) stamp(v uint64) int64 { return l.base + int64(v>>32) }

// newest is the latest stamp, or 0 when the log is empty.
func (l *stampLog) newest() int64 {
	if l.n == 0 {
		return 0
	}
	return l.stamp(l.slot(l.n - 1))
}

// prune drops the stamps at or before cutoff.
func (l *stampLog) prune(cutoff int64) {
	for l.n > 0 {
		v := l.buf[l.head]
		if l.stamp(v) > cutoff {
			return
		}
		l.total -= int64(v & maxSlotCount)
		l.head = (l.head + 1) % len(l.buf)
		l.n--
	}
}

// countUpTo counts the stamps at or before cutoff.
func (l *stampLog) countUpTo(cutoff int64) int64 {
	c := int64(0)
	for i := 0; i < l.n; i++ {
		v := l.slot(i)
		if l.stamp(v) > cutoff {
			break
		}
		c += int64(v & maxSlotCount)
	}
	return c
}

// nth returns the k-th oldest stamp, 1 ≤ k ≤ total.
func (l *stampLog) nth(k int64) int64 {
	for i := 0; i < l.n; i++ {
		v := l.slot(i)
		if k -= int64(v & maxSlotCount); k <= 0 {
			return l.stamp(v)
		}
	}
	return l.newest()
}

// add appends n stamps at t, which is at or after every stamp held. The log
// holds at most limit stamps, so it never needs more than limit slots.
func (l *stampLog) add(t, n, limit int64) {
	if l.n == 0 {
		l.base, l.head = t, 0
	}
	if l.n > 0 {
		last := (l.head + l.n - 1) % len(l.buf)
		if v := l.buf[last]; l.stamp(v) == t {
			room := int64(maxSlotCount - v&maxSlotCount)
			k := min(room, n)
			l.buf[last] = v + uint64(k)
			l.total += k
			n -= k
		}
	}
	if t-l.base > maxSlotCount {
		l.rebase()
	}
	for n > 0 {
		k := min(n, maxSlotCount)
		l.push(uint64(t-l.base)<<32|uint64(k), limit)
		l.total += k
		n -= k
	}
}

// rebase moves base to the oldest stamp. Every stamp held is within a window
// (at most 2^32−1 ms, see ringlimit.MaxLogWindow) of the newest, so the
// offsets fit again.
func (l *stampLog) rebase() {
	if l.n == 0 {
		return
	}
	shift := l.stamp(l.buf[l.head]) - l.base
	for i := 0; i < l.n; i++ {
		j := (l.head + i) % len(l.buf)
		l.buf[j] -= uint64(shift) << 32
	}
	l.base += shift
}

func (l *stampLog) push(v uint64, limit int64) {
	if l.n == len(l.buf) {
		size := int64(max(4, 2*len(l.buf)))
		size = max(min(size, limit), int64(l.n+1))
		buf := make([]uint64, size)
		for i := 0; i < l.n; i++ {
			buf[i] = l.slot(i)
		}
		l.buf, l.head = buf, 0
	}
	l.buf[(l.head+l.n)%len(l.buf)] = v
	l.n++
}
