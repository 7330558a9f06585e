package netchaos

import (
	"maps"
	"testing"
)

func TestCountDrops(t *testing.T) {
	log := `time=2026-12-01T01:09:53.537Z level=INFO msg="ring: members changed" member=n1 joined=[] left=[n3] updated=[] members=4
time=2026-12-01T01:09:53.543Z level=INFO msg="node: membership changed" node=n1 joined=[] left=[n3] members=4
time=2026-12-01T01:09:53.623Z level=INFO msg="node: membership changed" node=n1 joined=[] left="[n2 n3]" members=3
time=2026-12-01T01:09:56.097Z level=INFO msg="node: membership changed" node=n1 joined="[n2 n3]" left=[] members=5
time=2026-12-01T01:09:56.100Z level=WARN msg="node: hand-off push failed" node=n1 to=n2 keys=1`
	got := countDrops(log)
	want := map[string]int{"n2": 1, "n3": 2}
	if !maps.Equal(got, want) {
		t.Fatalf("countDrops = %v, want %v", got, want)
	}
}
