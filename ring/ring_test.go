package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "node-" + strconv.Itoa(i)
	}
	return out
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "user:" + strconv.Itoa(i)
	}
	return out
}

func owners(r *Ring, ks []string) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = r.Owner(k)
	}
	return out
}

func TestEmptyRing(t *testing.T) {
	for name, r := range map[string]*Ring{
		"nil":         nil,
		"no members":  New(nil, 0),
		"empty names": New([]string{"", ""}, 8),
	} {
		t.Run(name, func(t *testing.T) {
			if got := r.Owner("k"); got != "" {
				t.Errorf("Owner = %q, want \"\"", got)
			}
			if got := r.Owners("k", 3); got != nil {
				t.Errorf("Owners = %q, want nil", got)
			}
			if r.Len() != 0 || len(r.Members()) != 0 || r.Contains("") {
				t.Errorf("Len %d, Members %q, Contains(\"\") %v: want empty", r.Len(), r.Members(), r.Contains(""))
			}
		})
	}
}

func TestVirtualNodesDefault(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{0, 256}, {-3, 256}, {1, 1}, {64, 64}} {
		r := New([]string{"a", "b"}, tc.in)
		if got := r.VirtualNodes(); got != tc.want {
			t.Errorf("New(_, %d).VirtualNodes() = %d, want %d", tc.in, got, tc.want)
		}
		if got := len(r.hashes); got != 2*tc.want {
			t.Errorf("New(_, %d) placed %d virtual nodes, want %d", tc.in, got, 2*tc.want)
		}
	}
}

func TestMembersSortedDistinct(t *testing.T) {
	r := New([]string{"c", "a", "b", "a", ""}, 0)
	want := []string{"a", "b", "c"}
	if got := r.Members(); !slices.Equal(got, want) {
		t.Fatalf("Members = %q, want %q", got, want)
	}
	if r.Len() != 3 {
		t.Fatalf("Len = %d, want 3", r.Len())
	}
	r.Members()[0] = "zzz" // a copy: must not change the ring
	if !r.Contains("a") || r.Contains("zzz") {
		t.Fatalf("Members returned the ring's own slice")
	}
}

// Every node must route every key to the same owner whatever order it
// learned the members in.
func TestOwnerIndependentOfMemberOrder(t *testing.T) {
	members := names(5)
	ks := keys(100_000)
	want := owners(New(members, 0), ks)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5 {
		perm := slices.Clone(members)
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		if i == 0 {
			perm = append(perm, perm[0]) // a duplicate changes nothing
		}
		got := owners(New(perm, 0), ks)
		for j := range ks {
			if got[j] != want[j] {
				t.Fatalf("order %q: Owner(%q) = %q, want %q", perm, ks[j], got[j], want[j])
			}
		}
	}
}

func TestAddMemberMovesAboutOneSixthToIt(t *testing.T) {
	ks := keys(100_000)
	before := owners(New(names(5), 0), ks)
	after := owners(New(names(6), 0), ks)
	moved := 0
	for i := range ks {
		if before[i] == after[i] {
			continue
		}
		moved++
		if after[i] != "node-5" {
			t.Fatalf("key %q moved from %q to %q, not to the new member", ks[i], before[i], after[i])
		}
	}
	frac := float64(moved) / float64(len(ks))
	t.Logf("adding a 6th member moved %.1f%% of keys (ideal 16.7%%)", 100*frac)
	if frac < 0.10 || frac > 0.25 {
		t.Fatalf("moved %.1f%% of keys, want 10%%..25%%", 100*frac)
	}
}

func TestRemoveMemberMovesOnlyItsKeys(t *testing.T) {
	ks := keys(100_000)
	all := names(5)
	gone := "node-2"
	before := owners(New(all, 0), ks)
	after := owners(New(slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == gone }), 0), ks)
	moved := 0
	for i := range ks {
		switch {
		case before[i] == gone:
			moved++
			if after[i] == gone {
				t.Fatalf("key %q still owned by the removed member", ks[i])
			}
		case after[i] != before[i]:
			t.Fatalf("key %q of %q moved to %q though its owner stayed", ks[i], before[i], after[i])
		}
	}
	if moved == 0 {
		t.Fatalf("the removed member owned no keys")
	}
}

func TestBalance(t *testing.T) {
	ks := keys(100_000)
	r := New(names(5), 0)
	count := map[string]int{}
	for _, k := range ks {
		count[r.Owner(k)]++
	}
	if len(count) != 5 {
		t.Fatalf("keys spread over %d members, want 5: %v", len(count), count)
	}
	mean := float64(len(ks)) / 5
	busiest := 0
	for _, c := range count {
		busiest = max(busiest, c)
	}
	t.Logf("busiest member owns %.3f× the mean: %v", float64(busiest)/mean, count)
	if float64(busiest) > 1.2*mean {
		t.Fatalf("busiest member owns %d keys, more than 1.2× the mean %.0f: %v", busiest, mean, count)
	}
}

// Owners(key, 2)[1] is who owns key once its owner is gone: the target of a
// state handoff.
func TestOwnersSuccessorIsNextOwner(t *testing.T) {
	members := names(6)
	r := New(members, 0)
	without := map[string]*Ring{}
	for _, m := range members {
		without[m] = New(slices.DeleteFunc(slices.Clone(members), func(s string) bool { return s == m }), 0)
	}
	for _, k := range keys(20_000) {
		all := r.Owners(k, 10)
		if len(all) != len(members) {
			t.Fatalf("Owners(%q, 10) = %q, want all %d members", k, all, len(members))
		}
		if len(slices.Compact(slices.Sorted(slices.Values(all)))) != len(members) {
			t.Fatalf("Owners(%q, 10) = %q: not distinct", k, all)
		}
		if all[0] != r.Owner(k) {
			t.Fatalf("Owners(%q)[0] = %q, Owner = %q", k, all[0], r.Owner(k))
		}
		if next := without[all[0]].Owner(k); all[1] != next {
			t.Fatalf("Owners(%q)[1] = %q, but without %q the owner is %q", k, all[1], all[0], next)
		}
		if got := r.Owners(k, 2); !slices.Equal(got, all[:2]) {
			t.Fatalf("Owners(%q, 2) = %q, want %q", k, got, all[:2])
		}
	}
	if got := r.Owners("k", 0); got != nil {
		t.Fatalf("Owners(k, 0) = %q, want nil", got)
	}
}

func TestOwnerAllocatesNothing(t *testing.T) {
	r := New(names(100), 0)
	ks := keys(64)
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		_ = r.Owner(ks[i%len(ks)])
		i++
	})
	if allocs != 0 {
		t.Fatalf("Owner allocates %.1f times per call, want 0", allocs)
	}
}

func BenchmarkOwner(b *testing.B) {
	r := New(names(100), 0)
	ks := keys(1 << 12)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		_ = r.Owner(ks[i&(len(ks)-1)])
	}
}

func BenchmarkOwnerParallel(b *testing.B) {
	r := New(names(100), 0)
	ks := keys(1 << 12)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			_ = r.Owner(ks[i&(len(ks)-1)])
		}
	})
}

func BenchmarkNew(b *testing.B) {
	for _, n := range []int{5, 100} {
		members := names(n)
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = New(members, 0)
			}
		})
	}
}
