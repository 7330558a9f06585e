package hold

import (
	"fmt"
	"testing"

	"github.com/ringlimit/ringlimit"
)

// TestMarksBounded: past maxMarks a mark without a copy goes, the one that
// expires first, and is counted; a mark that holds a copy is never dropped.
func TestMarksBounded(t *testing.T) {
	c := New("n1")
	c.maxMarks = 4
	st := &ringlimit.State{Algorithm: ringlimit.FixedWindow, Window: 1000, B: 1}
	c.Gave("held", "n2", Version{Epoch: 1}, st, 9_000) // a copy: kept
	for i := range 6 {
		c.setMark(fmt.Sprintf("k%d", i), &mark{to: "n2", until: int64(1000 + i)})
	}
	if got := c.Marks(); got != 4 {
		t.Fatalf("%d marks, want the bound 4", got)
	}
	if c.MarksDropped != 3 {
		t.Fatalf("MarksDropped %d, want 3", c.MarksDropped)
	}
	if !c.HasCopy("held") {
		t.Fatal("the mark holding a copy was dropped")
	}
	for _, k := range []string{"k0", "k1", "k2"} {
		if _, ok := c.marks[k]; ok {
			t.Fatalf("%s kept: the marks that expire first should go", k)
		}
	}
}

// TestTickExpiresMarks: Tick drops the marks whose state no longer matters,
// so a node that gave keys away becomes Quiet again.
func TestTickExpiresMarks(t *testing.T) {
	c := New("n1")
	c.setMark("a", &mark{to: "n2", until: 100})
	c.setMark("b", &mark{to: "n2", until: 200})
	c.Tick(150)
	if _, ok := c.marks["a"]; ok {
		t.Fatal("an expired mark survived Tick")
	}
	if _, ok := c.marks["b"]; !ok {
		t.Fatal("a live mark was dropped by Tick")
	}
	c.Tick(200)
	if !c.Quiet() {
		t.Fatalf("not Quiet after every mark expired: %d marks, %d sources", c.Marks(), c.Sources())
	}
}
