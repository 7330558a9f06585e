package node

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringlimit/ringlimit/local"
)

// The hand-off window runs on real time (a bubble's fake time here, no
// sockets): it ends HandoffWindow after the last ring change, a change
// within it extends it, and its end drops every mark at once.
func TestHandoffWindowEndsAndDropsMarks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &Node{cfg: Config{Name: "a", HandoffWindow: 10 * time.Second}}
		n.local = local.New(local.Config{})
		n.holders.init("a", n.local, 100)
		n.openWindow() // New
		s := n.holders.lock("k")
		n.holders.set(s, "k", &mark{to: "b"})
		s.unlock()

		time.Sleep(9 * time.Second)
		n.closeWindow()
		if !n.changing.Load() || n.holders.size() != 1 {
			t.Fatalf("at 9 s: changing %v, %d marks; want the window open, the mark kept", n.changing.Load(), n.holders.size())
		}
		n.openWindow() // a ring change at 9 s: the window now ends at 19 s
		time.Sleep(9 * time.Second)
		n.closeWindow()
		if !n.changing.Load() || n.holders.size() != 1 {
			t.Fatalf("at 18 s: changing %v, %d marks; want the window extended", n.changing.Load(), n.holders.size())
		}
		time.Sleep(2 * time.Second)
		n.closeWindow()
		if n.changing.Load() || n.holders.size() != 0 {
			t.Fatalf("at 20 s: changing %v, %d marks; want the window over and no mark", n.changing.Load(), n.holders.size())
		}
	})
}
