// Package valkeytest starts a real Valkey (or Redis) server for tests: its own
// process on a free loopback port, with no persistence, stopped when the test
// ends. It can kill, hang and restart the server for failure tests, and
// start a Valkey Cluster of several masters (StartCluster).
//
// It looks for valkey-server on PATH, then redis-server. A test that needs a
// server fails (it does not skip) when neither is installed: the README's test
// command installs redis-server on a fresh Debian machine.
package valkeytest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one server process. Its methods are safe for simultaneous use.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string // extra server arguments (cluster mode)

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Binary returns the server binary found on PATH, or "" if there is none.
func Binary() string {
	for _, name := range []string{"valkey-server", "redis-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Start starts a server on a free loopback port and registers its stop with
// t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, nil)
}

// start starts a server with extra arguments; extra, if not nil, returns
// them for the chosen port.
func start(t testing.TB, extra func(port int) ([]string, error)) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Fatal("valkeytest: neither valkey-server nor redis-server is on PATH; run the README's test command, which installs redis-server")
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir()}
	var err error
	for range 5 { // a free port can be taken between probe and bind: retry
		if s.port, err = freePort(); err != nil {
			continue
		}
		if extra != nil {
			if s.args, err = extra(s.port); err != nil {
				continue
			}
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("valkeytest: start %s: %v", bin, err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port. It stays the same across Restart.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Name is the server binary's base name: valkey-server or redis-server.
func (s *Server) Name() string { return s.bin[strings.LastIndex(s.bin, "/")+1:] }

func (s *Server) start() error {
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--protected-mode", "no", "--loglevel", "warning"}
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	// Die with the test binary, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for ping(s.Addr()) != nil {
		select {
		case <-done:
			return fmt.Errorf("%s exited before answering on %s", s.bin, s.Addr())
		case <-time.After(5 * time.Millisecond): // poll the port again
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("no answer on %s within 10s", s.Addr())
		}
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits until the process is gone. State is lost.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Pause sends SIGSTOP: the server hangs, its connections stay open.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT after Pause.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Restart starts the server again on the same port after Kill (killing it
// first if it runs). The new server starts empty (a cluster node keeps its
// identity and slots: its nodes.conf survives in its directory).
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for { // the old socket can linger for a moment
		if err = s.start(); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		s.t.Fatalf("valkeytest: restart: %v", err)
	}
}

// Stop kills the server if it runs. Start registers it with t.Cleanup.
func (s *Server) Stop() {
	s.Resume() // a stopped process must be able to die
	s.Kill()
}

// ping sends PING over a raw connection and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// freePort returns a loopback port that was free a moment ago, drawn below
// the kernel's ephemeral range: a server that is
// killed and restarted on its port (Restart) would otherwise find it taken
// meanwhile by a socket the kernel numbered, such as a listener on port 0,
// or a client retrying the dead server whose local port came out equal to
// the server's, which connects to itself (TestValkeyStoreComesUpLater once:
// "exited before answering").
func freePort() (int, error) {
	lo := ephemeralLow() - 1
	var err error
	for range 64 {
		p := lowPorts + rand.IntN(max(lo-lowPorts, 1))
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			l.Close()
			return p, nil
		}
	}
	return 0, err
}

// lowPorts is the least port freePort draws.
const lowPorts = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= lowPorts+1000 {
		return 32768
	}
	return n
}
