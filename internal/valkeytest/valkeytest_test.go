package valkeytest

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLifecycle(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("fresh server: %v", err)
	}
	s.Kill()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("killed server still answers")
	}
	s.Restart()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
	s.Pause()
	if err := ping(s.Addr()); err == nil {
		t.Fatal("paused server answers")
	}
	s.Resume()
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("resumed server: %v", err)
	}
}
