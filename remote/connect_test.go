package remote_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// A Connector made while the server is down answers ErrNotConnected (bad
// input still as bad input) and decides from the store once it is up.
func TestConnectWhileServerDown(t *testing.T) {
	srv := valkeytest.Start(t)
	srv.Kill()
	k := remote.Connect(remote.Options{Addrs: []string{srv.Addr()}},
		remote.Config{}, remote.ConnectConfig{Retry: 10 * time.Millisecond})
	defer k.Close()
	ctx := context.Background()
	rule := ringlimit.Rule{Limit: 3, Window: time.Second}
	if _, err := k.AllowN(ctx, "k", rule, 1); !errors.Is(err, remote.ErrNotConnected) {
		t.Fatalf("server down: %v, want ErrNotConnected", err)
	}
	if _, err := k.AllowN(ctx, "", rule, 1); !errors.Is(err, ringlimit.ErrInvalidKey) {
		t.Fatalf("bad key while down: %v", err)
	}
	if err := k.Reset(ctx, "k"); !errors.Is(err, remote.ErrNotConnected) {
		t.Fatalf("Reset while down: %v", err)
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for !k.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("never connected")
		}
		time.Sleep(5 * time.Millisecond) // polling, with a deadline
	}
	d, err := k.AllowN(ctx, "k", rule, 1)
	if err != nil || !d.Allowed || d.Source != ringlimit.Store || d.Remaining != 2 {
		t.Fatalf("connected: %+v, %v", d, err)
	}
}

// Close stops a Connector that never connected.
func TestConnectCloseWhileRetrying(t *testing.T) {
	srv := valkeytest.Start(t)
	srv.Kill()
	k := remote.Connect(remote.Options{Addrs: []string{srv.Addr()}},
		remote.Config{}, remote.ConnectConfig{})
	k.Close()
	k.Close()
	if k.Connected() {
		t.Fatal("connected to a dead server")
	}
}
