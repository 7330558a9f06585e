package netchaos

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// TestSweep: a network left by a run whose process is gone is removed; one
// of this run is kept.
func TestSweep(t *testing.T) {
	requireDocker(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := strconv.Itoa(gone.Process.Pid)
	mine := "ringlimit-netchaos-sweep-mine-" + strconv.Itoa(os.Getpid())
	left := "ringlimit-netchaos-sweep-left-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		_, _ = docker("network", "rm", mine)
		_, _ = docker("network", "rm", left)
	})
	mustDocker(t, append(append([]string{"network", "create", "--internal"}, labels()...), mine)...)
	mustDocker(t, "network", "create", "--internal", "--label", label+"=1", "--label", pidLabel+"="+deadPid, left)

	sweep(t)

	if _, err := docker("network", "inspect", left); err == nil {
		t.Errorf("sweep kept %s, left by a run (pid %s) that is gone", left, deadPid)
	}
	if _, err := docker("network", "inspect", mine); err != nil {
		t.Errorf("sweep removed %s, this run's: %v", mine, err)
	}
}
