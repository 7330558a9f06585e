package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// store is the cluster's central Valkey: a server process, or the embedded
// one in a process of its own.
type store interface {
	Kind() string // what it is, for the view
	Addr() string // host:port, fixed for its whole life
	Running() bool
	Start() error // empty; starting a running store does nothing
	Stop() error  // abruptly, losing every key; stopping a stopped one does nothing
}

// newStore returns, for mode "auto", a valkey-server or redis-server found on
// PATH, else the embedded store; for mode "embedded", the embedded store. It
// listens on a free loopback port. The embedded store runs as bin (this
// binary) re-executed as "demo-cluster store", a process of its own, as the
// servers do: in the supervisor's process, whose traffic generator can take
// all of its CPU share, the store's replies queued behind the traffic's
// goroutines until the nodes' store calls timed out and the fail-open policy
// decided them. dir holds the store's log.
func newStore(mode, bin, dir string) (store, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	if mode == "auto" {
		for _, name := range []string{"valkey-server", "redis-server"} {
			if path, err := exec.LookPath(name); err == nil {
				return &procStore{kind: fmt.Sprintf("%s %s (%s)", name, serverVersion(path), path), name: name,
					argv: []string{path, "--port", port, "--bind", "127.0.0.1",
						"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", "store.log"},
					addr: addr, dir: dir}, nil
			}
		}
	}
	return &procStore{kind: embeddedKind, name: "the embedded store",
		argv: []string{bin, "store", "-addr", addr}, addr: addr, dir: dir}, nil
}

// embeddedKind is the embedded store's Kind: it names miniredis's version,
// which go.mod fixes.
const embeddedKind = "embedded (miniredis v2.40.0, its own process)"

// procStore runs a store as a child process with no persistence: a
// valkey-server or redis-server, or the embedded store. Stopping it kills the
// process, so a restarted store is empty, as a killed server with no
// persistence would be.
type procStore struct {
	kind, name string
	argv       []string // the command line, its program first
	addr, dir  string   // dir holds store.log, the process's stderr
	cmd        *exec.Cmd
	exited     chan struct{}
}

func (s *procStore) Kind() string { return s.kind }
func (s *procStore) Addr() string { return s.addr }

func (s *procStore) Running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Start starts the process and waits until it answers PING.
func (s *procStore) Start() error {
	if s.Running() {
		return nil
	}
	logPath := filepath.Join(s.dir, "store.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Stderr = logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("store: start %s: %w", s.name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if ping(s.addr) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("store: %s exited at start: %s", s.name, logTail(logPath))
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.Stop()
	return fmt.Errorf("store: %s did not answer PING on %s: %s", s.name, s.addr, logTail(logPath))
}

// Stop kills the process with SIGKILL and waits for it.
func (s *procStore) Stop() error {
	if !s.Running() {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	return nil
}

func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// serverVersion returns "7.0.15" from "Redis server v=7.0.15 sha=...".
func serverVersion(path string) string {
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "?"
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(string(out))
}

// freeAddr returns a loopback address whose TCP port was free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
