package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// store is the cluster's central Valkey: a server process, or the embedded one.
type store interface {
	Kind() string // what it is, for the view
	Addr() string // host:port, fixed for its whole life
	Running() bool
	Start() error // empty; starting a running store does nothing
	Stop() error  // abruptly, losing every key; stopping a stopped one does nothing
}

// newStore returns a valkey-server or redis-server found on PATH, else the
// embedded store, on a free loopback port. dir holds the server's files.
func newStore(dir string) (store, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"valkey-server", "redis-server"} {
		if path, err := exec.LookPath(name); err == nil {
			return &serverStore{path: path, name: name, version: serverVersion(path), addr: addr, dir: dir}, nil
		}
	}
	return newEmbeddedStore(addr), nil
}

// serverStore runs a valkey-server or redis-server with no persistence.
type serverStore struct {
	path, name, version string
	addr, dir           string
	cmd                 *exec.Cmd
	exited              chan struct{}
}

func (s *serverStore) Kind() string {
	return fmt.Sprintf("%s %s (%s)", s.name, s.version, s.path)
}
func (s *serverStore) Addr() string { return s.addr }

func (s *serverStore) Running() bool {
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

func (s *serverStore) Start() error {
	if s.Running() {
		return nil
	}
	_, port, _ := net.SplitHostPort(s.addr)
	cmd := exec.Command(s.path, "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", "store.log")
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
			return fmt.Errorf("store: %s exited at start (see %s/store.log)", s.name, s.dir)
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.Stop()
	return fmt.Errorf("store: %s did not answer PING on %s", s.name, s.addr)
}

// Stop kills the server with SIGKILL and waits for it.
func (s *serverStore) Stop() error {
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
