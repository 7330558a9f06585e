package wallclock

import (
	"testing"
	"testing/synctest"
	"time"
)

// Millis agrees with time.Now to the millisecond (a read between two of
// time.Now's lies between them), and Direct says so outside a bubble.
func TestMillisAgreesWithTimeNow(t *testing.T) {
	for range 1000 {
		before := time.Now().UnixMilli()
		got := Millis()
		after := time.Now().UnixMilli()
		if got < before || got > after {
			t.Fatalf("Millis %d, not within time.Now's %d–%d", got, before, after)
		}
	}
	if Direct() != direct {
		t.Fatalf("Direct() = %v outside a bubble, want %v", Direct(), direct)
	}
}

// Inside a synctest bubble the system clock is not the bubble's: Direct
// says so, and a caller that asked reads time.Now.
func TestDirectIsFalseInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if Direct() {
			t.Fatal("Direct() inside a synctest bubble")
		}
	})
}

func BenchmarkMillis(b *testing.B) {
	b.ReportAllocs()
	var s int64
	for b.Loop() {
		s += Millis()
	}
	_ = s
}

func BenchmarkTimeNowMilli(b *testing.B) {
	b.ReportAllocs()
	var s int64
	for b.Loop() {
		s += time.Now().UnixMilli()
	}
	_ = s
}
