package local

import (
	"testing"
	"time"
)

// The system clock agrees with time.Now to the millisecond (allowing for
// a millisecond boundary between the readings), and costs no allocation.
func TestSystemMillis(t *testing.T) {
	for range 1000 {
		before := time.Now().UnixMilli()
		got := systemMillis()
		after := time.Now().UnixMilli()
		if got < before || got > after {
			t.Fatalf("systemMillis %d, outside time.Now's %d to %d", got, before, after)
		}
	}
	if a := testing.AllocsPerRun(1000, func() { systemMillis() }); a != 0 {
		t.Fatalf("%v allocs per reading", a)
	}
}
