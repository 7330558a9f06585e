package node

import (
	"fmt"
	"testing"

	"github.com/ringlimit/ringlimit/ring"
)

// A change that moves none of a member's keys records nothing for its push;
// one that takes arcs records them; the first ring, and records past their
// bounds, make the push scan every key.
func TestMovesRecordsWhatMoved(t *testing.T) {
	four := ring.New([]string{"a", "b", "c", "d"}, 0)
	three := ring.New([]string{"a", "b", "c"}, 0) // d leaves: a loses nothing
	five := ring.New([]string{"a", "b", "c", "d", "e"}, 0)

	var mv moves
	mv.lost(four, three, "a")
	if arcs, strays, all := mv.take(); len(arcs) != 0 || len(strays) != 0 || all {
		t.Fatalf("a leave of another member: %d arcs, %d strays, all %v", len(arcs), len(strays), all)
	}
	mv.lost(four, five, "a")
	arcs, _, all := mv.take()
	if len(arcs) == 0 || all {
		t.Fatalf("a join: %d arcs, all %v", len(arcs), all)
	}
	_, lost := ring.Moved(four, five, "a")
	if len(arcs) != len(lost) {
		t.Fatalf("%d arcs recorded, ring.Moved says %d", len(arcs), len(lost))
	}
	mv.lost(nil, four, "a")
	if _, _, all := mv.take(); !all {
		t.Fatal("the first ring does not scan every key")
	}

	for i := range maxStrays {
		mv.stray(fmt.Sprint("k", i))
	}
	if _, strays, all := mv.take(); len(strays) != maxStrays || all {
		t.Fatalf("%d strays (all %v), want %d", len(strays), all, maxStrays)
	}
	for i := range maxStrays + 1 {
		mv.stray(fmt.Sprint("k", i))
	}
	if _, strays, all := mv.take(); len(strays) != 0 || !all {
		t.Fatalf("past the bound: %d strays kept, all %v", len(strays), all)
	}
	for !mv.all {
		mv.lost(four, five, "a")
	}
	if len(mv.arcs) != 0 {
		t.Fatalf("past the bound: %d arcs kept", len(mv.arcs))
	}
}
