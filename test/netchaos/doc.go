// Package netchaos holds the failure tests of ringlimit across real hosts:
// five node containers (test/chaos/chaosnode, built static into an image
// FROM scratch) on a private Docker network the test creates, Redis in a
// container of its own, and load from the test process through every node's
// HTTP endpoint. Faults come from the engine and the kernel only: docker
// kill, pause and rm (a node back at a new address), and iptables in a
// container's network namespace (entered from the host with nsenter, so the
// images stay FROM scratch): DROP rules for partitions and blocked ports,
// the statistic match for packet loss, and an NFQUEUE queue for latency,
// whose packets ./nfdelay accepts a fixed time after they came (this
// kernel has no sch_netem for tc), and CFS CPU quotas (docker run --cpus,
// and a busy loop moved into one node container's CPU cgroup) for the CPU
// throttling scenario: slow is not dead. The upgrade scenario rolls the
// cluster from an older release (commit 8ee53e9, extracted from the
// clone's history and built the same way) to the tree under test and one
// node back, under load; it skips, saying why, without git or that
// commit. It also holds the clock-skew tests, in process (node/nodetest
// with Config.Clock) and in containers (chaosnode's -clock-offset). Each scenario prints one row of test/chaos's table; see
// RESULTS.md. And it holds the CPU quota tests, which need no Docker: the
// demo cluster at a quarter of one CPU (TestDemoQuarterCPU) and a rolling
// restart in process at half a CPU (TestRollingRestartHalfCPU), each in a
// cgroup of its own with a CFS quota, as a Kubernetes CPU limit.
//
//	go test -v -count=1 ./test/netchaos/                            # the suite
//	go test -v -count=1 ./test/netchaos/ -netchaos.results=RESULTS.md # and write the table
//
// The container tests skip, saying why, when no Docker daemon answers or
// the test does not run as root (nsenter and iptables need it); the CPU
// quota tests skip when not root, when no cgroup with the cpu controller
// can be made, and with -short. Everything the container tests make carries
// the label ringlimit.netchaos, and every cgroup the quota tests make is
// named ringlimit-quota-PID-N; a run removes its own things when it ends,
// even when it fails, and the leftovers of runs whose process is gone when
// it starts.
package netchaos
