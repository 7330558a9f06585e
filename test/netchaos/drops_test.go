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

func TestCountOpens(t *testing.T) {
	log := `time=2026-12-01T01:09:53.537Z level=WARN msg="failover: breaker state changed" node=n1 breaker=peer:n2 from=closed to=open
time=2026-12-01T01:09:54.537Z level=INFO msg="failover: breaker state changed" node=n1 breaker=peer:n2 from=open to=half-open
time=2026-12-01T01:09:54.600Z level=INFO msg="failover: breaker state changed" node=n1 breaker=peer:n2 from=half-open to=closed
time=2026-12-01T01:09:55.000Z level=WARN msg="failover: breaker state changed" node=n1 breaker=store from=half-open to=open`
	if got := countOpens(log); got != 2 {
		t.Fatalf("countOpens = %d, want 2", got)
	}
}

func TestCPUCgroupDir(t *testing.T) {
	for _, tc := range []struct {
		in   string
		v2   bool
		want string
	}{
		{"4:memory:/docker/abc\n1:cpu:/docker/abc\n2:cpuacct:/docker/abc\n0::/\n", false, "/sys/fs/cgroup/cpu/docker/abc"},
		{"5:cpu,cpuacct:/docker/abc\n0::/\n", false, "/sys/fs/cgroup/cpu,cpuacct/docker/abc"},
		{"0::/system.slice/docker-abc.scope\n", true, "/sys/fs/cgroup/system.slice/docker-abc.scope"},
	} {
		got, err := cpuCgroupDir(tc.in, tc.v2)
		if err != nil || got != tc.want {
			t.Errorf("cpuCgroupDir(%q, %v) = %q, %v; want %q", tc.in, tc.v2, got, err, tc.want)
		}
	}
	if _, err := cpuCgroupDir("3:memory:/docker/abc\n", false); err == nil {
		t.Error("cpuCgroupDir found a CPU cgroup in a file without one")
	}
}
