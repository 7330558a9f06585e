package memstore

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// giveStep is one step of a give-back table: a charge of n hits at an
// instant (ms after t0), a give-back of an earlier step's charge, or a
// check of the remaining at an instant.
type giveStep struct {
	at     int64 // ms after t0
	op     byte  // 'c': charge n, admitted; 'g': give back step ref's charge; 'r': want remaining n (a peek)
	n      int64
	ref    int   // for 'g': the index of the charge step
	gave   bool  // for 'g': whether it gives anything
	atSkew int64 // for 'g': added to the charge's At (a caller whose At is off)
}

func runGiveSteps(t *testing.T, rule ringlimit.Rule, steps []giveStep) {
	t.Helper()
	t0 := int64(60_000*1000 + 10_000) // 10 s into a minute
	l := New(Config{})
	ds := make([]ringlimit.Decision, len(steps))
	for i, st := range steps {
		now := time.UnixMilli(t0 + st.at)
		switch st.op {
		case 'c':
			d, err := l.AllowNAt(now, "k", rule, st.n)
			if err != nil || !d.Allowed {
				t.Fatalf("step %d: charge %d: %+v %v", i, st.n, d, err)
			}
			ds[i] = d
		case 'g':
			c := steps[st.ref]
			ch := Charge{N: c.n, At: t0 + c.at + st.atSkew, Remaining: ds[st.ref].Remaining}
			if got := l.GiveBack(now, "k", rule, ch); got != st.gave {
				t.Fatalf("step %d: GiveBack of step %d: %v, want %v", i, st.ref, got, st.gave)
			}
		case 'r':
			d, err := l.AllowNAt(now, "k", rule, 0)
			if err != nil || d.Remaining != st.n {
				t.Fatalf("step %d: remaining %d (%v), want %d", i, d.Remaining, err, st.n)
			}
		}
	}
}

// TestGiveBack: each algorithm gives back what a charge still weighs on
// its state, and never more: a give-back key admits no more than one
// that was never charged.
func TestGiveBack(t *testing.T) {
	minute := func(alg ringlimit.Algorithm, limit int64) ringlimit.Rule {
		return ringlimit.Rule{Algorithm: alg, Limit: limit, Window: time.Minute}
	}
	for _, tc := range []struct {
		name  string
		rule  ringlimit.Rule
		steps []giveStep
	}{
		{"fixed, same window", minute(ringlimit.FixedWindow, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 1000, op: 'g', ref: 0, gave: true}, {at: 1000, op: 'r', n: 5}}},
		{"fixed, given twice: never above the limit", minute(ringlimit.FixedWindow, 5), []giveStep{
			{at: 0, op: 'c', n: 1}, {at: 0, op: 'g', ref: 0, gave: true}, {at: 0, op: 'g', ref: 0, gave: false}, {at: 0, op: 'r', n: 5}}},
		{"fixed, window turned", minute(ringlimit.FixedWindow, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 55_000, op: 'g', ref: 0, gave: false}, {at: 55_000, op: 'r', n: 5}}},
		// An At after now comes from a caller whose clock runs ahead: it
		// may be after the charge.
		{"token bucket, At after now", minute(ringlimit.TokenBucket, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 0, op: 'g', ref: 0, atSkew: 1, gave: false}, {at: 0, op: 'r', n: 2}}},
		{"fixed, At in an earlier window", minute(ringlimit.FixedWindow, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 1000, op: 'g', ref: 0, atSkew: -60_000, gave: false}, {at: 1000, op: 'r', n: 2}}},
		{"sliding, same window", minute(ringlimit.SlidingWindow, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 1000, op: 'g', ref: 0, gave: true}, {at: 1000, op: 'r', n: 5}}},
		// 25% into the next minute, 3 hits of the last one weigh ⌊3·0.75⌋ = 2.
		{"sliding, window turned once", minute(ringlimit.SlidingWindow, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 65_000, op: 'r', n: 3}, {at: 65_000, op: 'g', ref: 0, gave: true}, {at: 65_000, op: 'r', n: 5}}},
		{"sliding, turned once and written since", minute(ringlimit.SlidingWindow, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 65_000, op: 'c', n: 1}, {at: 65_000, op: 'g', ref: 0, gave: true}, {at: 65_000, op: 'r', n: 4}}},
		{"sliding, turned twice", minute(ringlimit.SlidingWindow, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 125_000, op: 'g', ref: 0, gave: false}, {at: 125_000, op: 'r', n: 5}}},
		{"token bucket, at once", minute(ringlimit.TokenBucket, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 0, op: 'g', ref: 0, gave: true}, {at: 0, op: 'r', n: 5}}},
		// 5 a minute: a hit refills in 12 s. 24 s after the charge 2 of its
		// 3 hits have drained; the third comes back, the others are back
		// already.
		{"token bucket, partly drained", minute(ringlimit.TokenBucket, 5), []giveStep{
			{at: 0, op: 'c', n: 5}, {at: 24_000, op: 'r', n: 2}, {at: 24_000, op: 'g', ref: 0, gave: true}, {at: 24_000, op: 'r', n: 5}}},
		// Drained away, then charged again by another call: the old
		// charge weighs nothing, the new call's hits stay (giving the old
		// one's whole 3 hits back took the new ones too).
		{"token bucket, drained away", minute(ringlimit.TokenBucket, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 40_000, op: 'c', n: 3}, {at: 40_000, op: 'g', ref: 0, gave: false}, {at: 40_000, op: 'r', n: 2}}},
		{"leaky bucket, its hits last", minute(ringlimit.LeakyBucket, 5), []giveStep{
			{at: 0, op: 'c', n: 1}, {at: 0, op: 'c', n: 3}, {at: 0, op: 'g', ref: 1, gave: true}, {at: 0, op: 'r', n: 4}}},
		{"leaky bucket, partly departed", minute(ringlimit.LeakyBucket, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 13_000, op: 'g', ref: 0, gave: true}, {at: 13_000, op: 'r', n: 5}}},
		// A hit admitted after them has its slot: nothing moves up.
		{"leaky bucket, a hit after them", minute(ringlimit.LeakyBucket, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 0, op: 'c', n: 1}, {at: 0, op: 'g', ref: 0, gave: false}, {at: 0, op: 'r', n: 1}}},
		{"leaky bucket, a hit after them, later", minute(ringlimit.LeakyBucket, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 12_000, op: 'c', n: 1}, {at: 12_000, op: 'g', ref: 0, gave: false}, {at: 12_000, op: 'r', n: 2}}},
		{"sliding log, newest stamp", minute(ringlimit.SlidingLog, 5), []giveStep{
			{at: 0, op: 'c', n: 1}, {at: 1000, op: 'c', n: 3}, {at: 1000, op: 'g', ref: 1, gave: true}, {at: 1000, op: 'r', n: 4}}},
		{"sliding log, a stamp shared with a later call", minute(ringlimit.SlidingLog, 5), []giveStep{
			{at: 0, op: 'c', n: 2}, {at: 0, op: 'c', n: 1}, {at: 0, op: 'g', ref: 0, gave: true}, {at: 0, op: 'r', n: 4}}},
		{"sliding log, emptied", minute(ringlimit.SlidingLog, 5), []giveStep{
			{at: 0, op: 'c', n: 5}, {at: 0, op: 'g', ref: 0, gave: true}, {at: 0, op: 'r', n: 5}}},
		{"sliding log, a later stamp", minute(ringlimit.SlidingLog, 5), []giveStep{
			{at: 0, op: 'c', n: 3}, {at: 1000, op: 'c', n: 1}, {at: 1000, op: 'g', ref: 0, gave: false}, {at: 1000, op: 'r', n: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) { runGiveSteps(t, tc.rule, tc.steps) })
	}
}

// TestGiveBackNeverOverAdmits: for every algorithm, a charge given back
// at a later instant, its At exact or early, with or without another
// call's hits admitted in between, leaves the key admitting no more at
// any instant after than a key that never had the charge.
func TestGiveBackNeverOverAdmits(t *testing.T) {
	t0 := int64(60_000*1000 + 7_300)
	for alg := ringlimit.TokenBucket; alg <= ringlimit.SlidingWindow; alg++ {
		rule := ringlimit.Rule{Algorithm: alg, Limit: 7, Window: 10 * time.Second}
		for _, delay := range []int64{0, 1, 900, 1430, 2700, 9999, 10_000, 12_500, 25_000} {
			for _, early := range []int64{0, 1, 1500} {
				for _, later := range []int64{-1, 0, 1, 2} { // a call between: none, or at delay·later/2
					with, without := New(Config{}), New(Config{})
					both := func(ms, n int64) {
						with.AllowNAt(time.UnixMilli(t0+ms), "k", rule, n)
						without.AllowNAt(time.UnixMilli(t0+ms), "k", rule, n)
					}
					for _, ms := range []int64{-4000, -2500, -10} {
						both(ms, 1)
					}
					d, _ := with.AllowNAt(time.UnixMilli(t0), "k", rule, 2)
					if !d.Allowed {
						t.Fatalf("%s: the charge was refused", alg)
					}
					if later >= 0 {
						both(delay*later/2, 1)
					}
					with.GiveBack(time.UnixMilli(t0+delay), "k", rule, Charge{N: 2, At: t0 - early, Remaining: d.Remaining})
					for ms := delay; ms < delay+25_000; ms += 50 {
						now := time.UnixMilli(t0 + ms)
						dw, _ := with.AllowNAt(now, "k", rule, 0)
						dn, _ := without.AllowNAt(now, "k", rule, 0)
						if dw.Remaining > dn.Remaining || dw.Allowed && !dn.Allowed {
							t.Fatalf("%s, given back %d ms later, At %d ms early, a call between at %d/2 of it: at +%d ms remaining %d, over the %d of a key never charged",
								alg, delay, early, later, ms, dw.Remaining, dn.Remaining)
						}
					}
				}
			}
		}
	}
}

func TestGiveBackNothingToGive(t *testing.T) {
	l := New(Config{})
	r := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Minute}
	t0 := time.UnixMilli(600_000)
	l.AllowNAt(t0, "k", r, 1)
	if l.GiveBack(t0, "absent", r, Charge{N: 1, At: 600_000}) {
		t.Fatal("gave back to an absent key")
	}
	other := ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 5, Window: time.Minute}
	if l.GiveBack(t0, "k", other, Charge{N: 1, At: 600_000}) {
		t.Fatal("gave back under another rule")
	}
	if l.GiveBack(t0, "k", r, Charge{N: 6, At: 600_000}) {
		t.Fatal("gave back more hits than the rule's capacity")
	}
}

// BenchmarkGiveBack is a charge and its give-back, on one key, for each
// algorithm.
func BenchmarkGiveBack(b *testing.B) {
	for alg := ringlimit.TokenBucket; alg <= ringlimit.SlidingWindow; alg++ {
		b.Run(alg.String(), func(b *testing.B) {
			l := New(Config{})
			rule := ringlimit.Rule{Algorithm: alg, Limit: 1000, Window: time.Hour}
			now := time.UnixMilli(1_765_000_000_000)
			l.AllowNAt(now, "k", rule, 1)
			b.ReportAllocs()
			for b.Loop() {
				d, _ := l.AllowNAt(now, "k", rule, 2)
				if !l.GiveBack(now, "k", rule, Charge{N: 2, At: now.UnixMilli(), Remaining: d.Remaining}) {
					b.Fatal("gave nothing back")
				}
			}
		})
	}
}
