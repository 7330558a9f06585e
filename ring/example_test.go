package ring_test

import (
	"fmt"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/ring"
)

func ExampleNew() {
	r := ring.New([]string{"api-3", "api-1", "api-2"}, 0)
	// Any node with the same members, in any order, agrees.
	same := ring.New([]string{"api-2", "api-3", "api-1"}, 0)

	owner := r.Owner("user:42")
	fmt.Println(owner == same.Owner("user:42"))
	fmt.Println(r.Members(), r.Len())

	// The second owner takes the key over when the first leaves.
	next := r.Owners("user:42", 2)[1]
	gone := ring.New(slices.DeleteFunc(r.Members(), func(m string) bool { return m == owner }), 0)
	fmt.Println(gone.Owner("user:42") == next)

	fmt.Printf("%q\n", ring.New(nil, 0).Owner("user:42"))
	// Output:
	// true
	// [api-1 api-2 api-3] 3
	// true
	// ""
}

func ExampleNewMembership() {
	var ms []*ring.Membership
	for _, name := range []string{"api-1", "api-2"} {
		cfg := ring.FastLocalConfig(name) // 127.0.0.1, a free port
		cfg.RPCAddr = "127.0.0.1:9001"    // where this member's peers forward to
		m, err := ring.NewMembership(cfg)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer m.Shutdown()
		ms = append(ms, m)
	}
	if _, err := ms[1].Join([]string{ms[0].GossipAddr()}); err != nil {
		fmt.Println(err)
		return
	}
	for deadline := time.Now().Add(5 * time.Second); ms[0].Ring().Len() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}

	r := ms[0].Ring() // a snapshot: lookups take no lock
	owner := r.Owner("user:42")
	addr, _ := ms[0].RPCAddr(owner)
	fmt.Println(r.Members(), addr)
	// Output:
	// [api-1 api-2] 127.0.0.1:9001
}

func ExampleRing_Arcs() {
	r := ring.New([]string{"a", "b", "c"}, 64)
	share := map[string]float64{}
	for _, a := range r.Arcs() {
		share[a.Owner] += float64(a.To-a.From) / (1 << 64) // wraps correctly for the arc across zero
	}
	fmt.Println(len(share), share["a"]+share["b"]+share["c"] > 0.999)
	// Output: 3 true
}
