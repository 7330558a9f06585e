package memstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
)

// recount is what the shard holds, counted afresh (see memory.go).
func (s *shard) recount() int64 {
	b := s.layoutBytes() - s.keys.bytes - s.logs.bytes - allocBytes(minBuckets*8, false) // an empty shard counts 0
	b += allocBytes(int64(cap(s.logs.pages))*24, true) + int64(len(s.logs.pages))*allocBytes(logsPerPage*logHeader, true)
	b += allocBytes(int64(cap(s.keys.chunks))*chunkStruct, true)
	live, ok := make([]int32, len(s.keys.chunks)), true
	for c := range s.keys.chunks {
		b += allocBytes(int64(len(s.keys.chunks[c].buf)), false)
	}
	// in reports whether header h is in chunk c, as it is, not in one it
	// replaced.
	in := func(h []byte, c uint32) bool {
		buf := s.keys.chunks[c&^ringRec].buf
		p, lo := uintptr(unsafe.Pointer(&h[0])), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
		return p >= lo && p < lo+uintptr(len(buf))
	}
	s.indexRange(func(i int32) {
		e := s.at(i)
		b += e.st.bytes()
		if e.key != "" && !s.inKeyArea(i) { // in the key arena
			h := header(e.key)
			if binary.LittleEndian.Uint32(h) != uint32(i) || !in(h, binary.LittleEndian.Uint32(h[4:])) {
				ok = false // not the slot's record, or not in its chunk
			}
			live[binary.LittleEndian.Uint32(h[4:])] += recLen(len(e.key))
		}
		if l := e.st.log; l != nil && (l.slab == 0 || s.logs.at(l.slab-1) != l) {
			ok = false // its header is not in the slab
		}
		if l := e.st.log; l != nil && len(l.buf) > 0 { // its ring too
			h := ringHeader(l.buf)
			if binary.LittleEndian.Uint32(h) != uint32(i) || binary.LittleEndian.Uint32(h[4:])&ringRec == 0 || !in(h, binary.LittleEndian.Uint32(h[4:])) {
				ok = false
			}
			live[binary.LittleEndian.Uint32(h[4:])&^ringRec] += recLen(8 * len(l.buf))
		}
	})
	for c, n := range live { // the arena's own count of each chunk's records
		if s.keys.chunks[c].live != n || !ok {
			return -1
		}
	}
	return b
}

// Each shard's byte count equals what it holds, recounted, after a
// random mix of every operation that adds, changes or drops state, with
// evictions by MaxKeys and by MaxBytes.
func TestBytesAccounting(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	l := New(Config{MaxKeys: 300, MaxBytes: 60 << 10, Clock: clk})
	r := rand.New(rand.NewPCG(5, 6))
	rules := []ringlimit.Rule{
		{Algorithm: ringlimit.SlidingLog, Limit: 50, Window: time.Second},
		{Algorithm: ringlimit.SlidingLog, Limit: 200, Window: time.Minute},
		{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second},
		{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute},
	}
	ctx := context.Background()
	for step := range 50_000 {
		key := fmt.Sprint("k", r.IntN(500))
		if r.IntN(3) == 0 {
			key += string(make([]byte, r.IntN(300)))
		}
		switch x := r.IntN(100); {
		case x < 80:
			l.AllowN(ctx, key, rules[r.IntN(len(rules))], 1+int64(r.IntN(3)))
		case x < 85:
			l.Reset(ctx, key)
		case x < 90:
			if st, ok := l.Take(key); ok {
				l.Import(fmt.Sprint("m", r.IntN(500)), st)
			}
		case x < 93:
			l.AllowNHeldAt(clk.Now(), key, rules[r.IntN(len(rules))], 1)
		default:
			clk.Advance(time.Duration(r.IntN(50)) * time.Millisecond)
		}
		if step%500 == 0 {
			var keys int
			for i := range l.shards {
				s := &l.shards[i]
				want := s.recount()
				n := 0
				s.indexRange(func(int32) { n++ })
				if s.bytes != want || n != s.nkeys {
					t.Fatalf("step %d shard %d: %d bytes, %d keys counted; %d, %d held", step, i, s.bytes, s.nkeys, want, n)
				}
				if s.bytes > s.maxBytes+8*200+64 { // one log may hold up to its Limit alone
					t.Fatalf("step %d shard %d: %d bytes, over %d", step, i, s.bytes, s.maxBytes)
				}
				keys += n
			}
			if keys > 300 {
				t.Fatalf("step %d: %d keys held, over MaxKeys 300", step, keys)
			}
		}
	}
	if st := l.Stats(); st.Evicted == 0 {
		t.Fatalf("the workload never reached the bounds: %+v", st)
	}
}

// divider divides exactly, at the edges of every quotient.
func TestDivider(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	ds := []int64{1, 2, 3, 7, 1000, 86_400_000, 1<<51 - 1, 1 << 51}
	for range 200 {
		ds = append(ds, 1+r.Int64N(1<<51))
	}
	for _, d := range ds {
		v := newDivider(d)
		as := []int64{0, 1, d - 1, d, d + 1, 1<<52 - 1, 1 << 52, 1<<62 - 1}
		for range 200 {
			as = append(as, r.Int64N(1<<62))
			q := r.Int64N((1<<62)/d + 1)
			as = append(as, q*d, q*d-1, q*d+1)
		}
		for _, a := range as {
			if a < 0 || a >= 1<<62 {
				continue
			}
			if got := v.div(a); got != a/d {
				t.Fatalf("%d/%d = %d, want %d", a, d, got, a/d)
			}
			if got := v.ceil(a); got != ceilDiv(a, d) {
				t.Fatalf("⌈%d/%d⌉ = %d, want %d", a, d, got, ceilDiv(a, d))
			}
		}
	}
}

// What eviction takes for a denying state is exactly what its rule says:
// after a random mix of AllowN, AllowAll and peeks on keys that each keep
// their rules, with time going forward, every state held is marked denying
// at now if and only if a peek for one hit under its rule is denied.
func TestDenyingIsExact(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	l := New(Config{Clock: clk})
	r := rand.New(rand.NewPCG(9, 10))
	pool := []ringlimit.Rule{
		{Algorithm: ringlimit.TokenBucket, Limit: 3, Window: 30 * time.Millisecond, Burst: 4},
		{Algorithm: ringlimit.LeakyBucket, Limit: 2, Window: 20 * time.Millisecond, Burst: 3},
		{Algorithm: ringlimit.FixedWindow, Limit: 3, Window: 25 * time.Millisecond},
		{Algorithm: ringlimit.SlidingWindow, Limit: 4, Window: 30 * time.Millisecond},
		{Algorithm: ringlimit.SlidingLog, Limit: 3, Window: 20 * time.Millisecond},
	}
	// Key k uses pool[k%5] alone (AllowN) or pool[k%5], pool[(k+1)%5] (AllowAll).
	rulesOf := func(k int) []ringlimit.Rule {
		if k%2 == 0 {
			return pool[k%5 : k%5+1]
		}
		return []ringlimit.Rule{pool[k%5], pool[(k+1)%5]}
	}
	ctx := context.Background()
	denials := 0
	for step := range 20_000 {
		k := r.IntN(40)
		key, rules, n := fmt.Sprint("k", k), rulesOf(k), int64(r.IntN(3))
		if len(rules) == 1 {
			l.AllowN(ctx, key, rules[0], n)
		} else {
			l.AllowAll(ctx, key, rules, n)
		}
		if r.IntN(4) == 0 {
			clk.Advance(time.Duration(r.IntN(4)) * time.Millisecond)
		}
		if step%50 != 0 {
			continue
		}
		now := clk.Now()
		for k := range 40 {
			key, rules := fmt.Sprint("k", k), rulesOf(k)
			s, frag := l.locate(key)
			for j, rule := range rules {
				i, ok := s.lookup(key, frag, uint64(j))
				if !ok || s.at(i).until <= now.UnixMilli() {
					continue
				}
				var d ringlimit.Decision
				p := paramsOf(rule)
				decide(&d, &s.at(i).st, rule.Algorithm, &p, now.UnixMilli(), 1, false)
				if got := s.denying(i, now.UnixMilli()); got != !d.Allowed {
					t.Fatalf("step %d: %s state %d (%s) marked denying %v; a peek decides %+v", step, key, j, rule.Algorithm, got, d)
				}
				if !d.Allowed {
					denials++
				}
			}
		}
	}
	if denials < 100 {
		t.Fatalf("only %d denying states seen: the workload does not exhaust keys", denials)
	}
}

var (
	sinkBytes [][]byte
	sinkPtrs  [][]*byte
)

// allocBytes is what the runtime spends: TotalAlloc grows by it for each
// object of every size up to and past the largest small object, with and
// without pointers.
func TestAllocBytesMatchesRuntime(t *testing.T) {
	const k = 64
	sinkBytes, sinkPtrs = make([][]byte, k), make([][]*byte, k)
	var m runtime.MemStats
	measure := func(alloc func(i int)) int64 { // the least of three runs: the runtime allocates now and then too
		least := int64(math.MaxInt64)
		for range 3 {
			runtime.ReadMemStats(&m)
			before := m.TotalAlloc
			for i := range k {
				alloc(i)
			}
			runtime.ReadMemStats(&m)
			least = min(least, int64(m.TotalAlloc-before)/k)
		}
		return least
	}
	sizes := []int{}
	for n := 8; n <= 40_000; n += 8 + n/16 {
		sizes = append(sizes, n, n+1)
	}
	sizes = append(sizes, 512, 513, 520, 16384, 32760, 32768, 32769, 64*256)
	for _, n := range sizes {
		if raceEnabled && n < 16 {
			continue // the race detector makes an 8-byte object 16
		}
		if got, want := measure(func(i int) { sinkBytes[i] = make([]byte, n) }), allocBytes(int64(n), false); got != want {
			t.Errorf("%d bytes without pointers: the runtime spends %d, allocBytes says %d", n, got, want)
		}
		if n%8 == 0 {
			if got, want := measure(func(i int) { sinkPtrs[i] = make([]*byte, n/8) }), allocBytes(int64(n), true); got != want {
				t.Errorf("%d bytes of pointers: the runtime spends %d, allocBytes says %d", n, got, want)
			}
		}
	}
	sinkBytes, sinkPtrs = nil, nil
}

// A state that denied and is then replaced by one under another rule (an
// AllowN or an AllowAll whose rule at the index differs) no longer counts
// as denying.
func TestDenyingForgetsAReplacedState(t *testing.T) {
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	ctx := context.Background()
	tight := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: time.Minute}
	loose := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Minute}
	for name, replace := range map[string]func(l *Limiter){
		"AllowN":   func(l *Limiter) { l.AllowN(ctx, "k", loose, 1) },
		"AllowAll": func(l *Limiter) { l.AllowAll(ctx, "k", []ringlimit.Rule{loose}, 1) },
	} {
		l := New(Config{Clock: clk})
		l.AllowN(ctx, "k", tight, 1)
		s, frag := l.locate("k")
		i, _ := s.lookup("k", frag, 0)
		now := clk.Now().UnixMilli()
		if !s.denying(i, now) {
			t.Fatalf("%s: an exhausted state is not marked denying", name)
		}
		replace(l)
		if i2, ok := s.lookup("k", frag, 0); !ok || i2 != i || s.at(i).tag>>56 != uint64(ringlimit.TokenBucket) {
			t.Fatalf("%s: the state was not replaced in its slot", name)
		}
		if s.denying(i, now) {
			t.Errorf("%s: a state replaced under another rule, 9 hits left, is still marked denying", name)
		}
	}
}
