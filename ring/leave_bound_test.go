package ring

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/hashicorp/memberlist"
)

// A leave intent goes to every other member, over at most maxLeaveStreams
// streams at once: with 40 members whose sends all hang, exactly that many
// are in flight, and once they end every member has had its one intent.
func TestLeaveIntentStreamsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const others = 40
		m := &Membership{cfg: Config{Name: "self"}, log: slog.New(slog.DiscardHandler), members: map[string]memberInfo{
			"self": {addr: "127.0.0.1:1"},
		}}
		for i := range others {
			m.members[fmt.Sprint("m", i)] = memberInfo{addr: fmt.Sprintf("127.0.0.%d:7946", i+2)}
		}
		release := make(chan struct{})
		var inFlight atomic.Int64
		var mu sync.Mutex
		var got []string
		m.sendLeave = func(to *memberlist.Node, msg []byte) error {
			inFlight.Add(1)
			defer inFlight.Add(-1)
			mu.Lock()
			got = append(got, to.Name+"@"+to.Address()+":"+string(msg))
			mu.Unlock()
			<-release // a member that does not answer
			return nil
		}
		ended := m.tellLeaving([]byte("bye"))
		synctest.Wait() // every sender is blocked in a send
		if n := inFlight.Load(); n != maxLeaveStreams {
			t.Fatalf("%d sends in flight at once, want the bound, %d", n, maxLeaveStreams)
		}
		select {
		case <-ended:
			t.Fatal("ended while sends were in flight")
		default:
		}
		close(release)
		<-ended
		m.wg.Wait()
		var want []string
		for i := range others {
			want = append(want, fmt.Sprintf("m%d@127.0.0.%d:7946:bye", i, i+2))
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("sends %v, want one to each other member: %v", got, want)
		}
	})
}
