package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// Keys chosen so that their hashes (Config.Hash is public: node passes
// xxhash) share the low half and fragments whose Fibonacci homes agree — the
// keys a client would craft against an unseeded index, all in one shard and
// one run of buckets. With the seeded shard pick and home they must spread:
// the mean probe distance stays that of random keys, not hundreds.
func TestCraftedKeysDoNotShareAHome(t *testing.T) {
	const n = 4000
	const fib = uint32(0x9e3779b1)
	fibInv := fib // its inverse mod 2^32, by Newton's iteration
	for range 5 {
		fibInv *= 2 - fib*fibInv
	}
	hashes := map[string]uint64{}
	for i := range n {
		frag := (0xabc00000 + uint32(i)) * fibInv // frag*fib = 0xabc00000+i: one Fibonacci home
		hashes["k"+strconv.Itoa(i)] = uint64(frag) << 32
	}
	if fib*fibInv != 1 {
		t.Fatal("fibInv is not the inverse")
	}
	l := New(Config{MaxKeys: 1 << 20, Hash: func(k string) uint64 { return hashes[k] }})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute}
	for k := range hashes {
		if _, err := l.AllowN(context.Background(), k, rule, 1); err != nil {
			t.Fatal(err)
		}
	}
	var total, worst, keys int
	used := 0
	for i := range l.shards {
		s := &l.shards[i]
		if s.nkeys > 0 {
			used++
		}
		mask := uint32(len(s.buckets) - 1)
		for k, h := range hashes {
			frag := uint32(h >> 32)
			if sh, _ := l.locate(k); sh != s {
				continue
			}
			d := 0
			for p := s.home(frag); ; p = (p + 1) & mask {
				if v := s.buckets[p]; uint32(v>>32) == frag && s.at(int32(uint32(v))-1).key == k {
					break
				}
				d++
			}
			total += d
			worst = max(worst, d)
			keys++
		}
	}
	if keys != n {
		t.Fatalf("found %d keys, want %d", keys, n)
	}
	mean := float64(total) / n
	t.Logf("shards used %d of %d; mean probe distance %.2f, worst %d", used, len(l.shards), mean, worst)
	if used < len(l.shards)/2 {
		t.Errorf("the crafted keys crowd %d of %d shards", used, len(l.shards))
	}
	if mean > 4 {
		t.Errorf("mean probe distance %.1f: crafted keys share a run of buckets", mean)
	}
}
