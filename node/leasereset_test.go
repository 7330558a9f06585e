package node_test

import (
	"testing"

	"github.com/ringlimit/ringlimit/node"
)

// A borrower's give-back served at the holder between the key's Reset and
// the revoke of its leases was taken from the state before the Reset: it
// gives nothing back, and is counted, and the key admits its capacity and
// no more. The ordering is driven white-box (ResetHeld, then the borrower gives its
// lease back, then RevokeLeases). Before, the give-back went into the new state: 1,010
// of 1,000.
func TestGiveBackBetweenResetAndRevoke(t *testing.T) {
	lt := startLeasedTrio(t, 1000)
	_, _, left, ok := node.HeldLease(lt.borrower, lt.key)
	if !ok || left <= 0 {
		t.Fatalf("the borrower's lease: %d left, held %v", left, ok)
	}
	dropped := lt.owner.Stats().Leases.Dropped
	if err := node.ResetHeld(lt.owner, lt.key); err != nil {
		t.Fatal(err)
	}
	if d, err := lt.owner.AllowN(ctx, lt.key, lt.rule, left); err != nil || !d.Allowed { // callers use the new state
		t.Fatalf("a call after the Reset: %+v, %v", d, err)
	}
	node.ReturnLeases(lt.borrower) // its give-back is served now, before the revoke
	if got := lt.owner.Stats().Leases.Dropped - dropped; got != 1 {
		t.Fatalf("the holder dropped %d give-backs, want 1", got)
	}
	node.RevokeLeases(lt.owner, lt.key)
	for _, nd := range lt.c.Nodes {
		if s := nd.Stats().Leases; s.Held != 0 {
			t.Fatalf("%s holds %d leases after the revoke", nd.Name(), s.Held)
		}
	}
	got, _ := hitUntilDenied(t, lt.c.Nodes, 2, lt.key, lt.rule, false)
	got += left // the call after the Reset
	if got > 1000 || got < 990 {
		t.Fatalf("admitted %d after the Reset, want its capacity of 1,000 (at most 1%% less); the give-back had %d", got, left)
	}
}
