package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// nodeProc is one node process: its name and addresses are fixed up front, so
// a restarted node comes back as the same member on the same ports.
type nodeProc struct {
	name                  string
	httpAddr, gossip, rpc string
	mu                    sync.Mutex
	cmd                   *exec.Cmd
	exited                chan struct{} // closed when cmd has been waited for
	starts                int
	serving               atomic.Bool // ready, and not being killed: traffic may go here
}

// running reports whether the process is alive.
func (p *nodeProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// supervisor starts, kills and restarts the node processes: this binary,
// re-executed with the hidden "node" subcommand.
type supervisor struct {
	bin, dir, rulesPath, storeAddr, secretHex string
	nodes                                     []*nodeProc
	events                                    *eventLog
	wg                                        sync.WaitGroup // the Wait goroutines
}

func newSupervisor(bin, dir, rulesPath, storeAddr, secretHex string, n int, events *eventLog) (*supervisor, error) {
	s := &supervisor{bin: bin, dir: dir, rulesPath: rulesPath, storeAddr: storeAddr, secretHex: secretHex, events: events}
	addrs, err := freeAddrs(3 * n)
	if err != nil {
		return nil, err
	}
	for i := range n {
		s.nodes = append(s.nodes, &nodeProc{name: fmt.Sprintf("n%d", i+1),
			httpAddr: addrs[3*i], gossip: addrs[3*i+1], rpc: addrs[3*i+2]})
	}
	return s, nil
}

// freeAddrs returns n distinct loopback addresses whose ports were free for
// both TCP and UDP (gossip uses both) a moment ago.
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for len(addrs) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		held = append(held, ln)
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err != nil {
			continue // its UDP twin is taken: try another
		}
		held = append(held, pc)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// logTail returns the end of a node's log, for an error message.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// startAll starts node 1, then each other node joining every node already up.
func (s *supervisor) startAll(ctx context.Context) error {
	for i := range s.nodes {
		if err := s.start(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// start starts node i (0-based), joining the gossip addresses of the nodes
// that are running, and waits for its ready line.
func (s *supervisor) start(ctx context.Context, i int) error {
	p := s.nodes[i]
	if p.running() {
		return nil
	}
	var join []string
	for _, q := range s.nodes {
		if q != p && q.running() {
			join = append(join, q.gossip)
		}
	}
	args := []string{"node", "-name", p.name, "-http", p.httpAddr, "-gossip", p.gossip, "-rpc", p.rpc,
		"-rules", s.rulesPath, "-store", s.storeAddr}
	if len(join) > 0 {
		args = append(args, "-join", strings.Join(join, ","))
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(os.Environ(), secretEnv+"="+s.secretHex)
	cmd.Stderr = logf
	cmd.SysProcAttr = childAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	ready := make(chan readyLine, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		r := bufio.NewReader(out)
		if line, err := r.ReadBytes('\n'); err == nil {
			var rl readyLine
			if json.Unmarshal(line, &rl) == nil && rl.Ready {
				ready <- rl
			}
		}
		io.Copy(io.Discard, r)
		cmd.Wait()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.starts++
	p.mu.Unlock()

	timeout := time.NewTimer(15 * time.Second)
	defer timeout.Stop()
	select {
	case <-ready:
		p.serving.Store(true)
		if p.starts > 1 {
			s.events.add("restarted %s (pid %d), joining %d", p.name, cmd.Process.Pid, len(join))
		} else {
			s.events.add("started %s (pid %d) http %s gossip %s", p.name, cmd.Process.Pid, p.httpAddr, p.gossip)
		}
		return nil
	case <-exited:
		err = fmt.Errorf("%s exited at start: %s", p.name, logTail(filepath.Join(s.dir, p.name+".log")))
	case <-timeout.C:
		err = fmt.Errorf("%s not ready after 15s: %s", p.name, logTail(filepath.Join(s.dir, p.name+".log")))
	case <-ctx.Done():
		err = ctx.Err()
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	return err
}

// kill sends SIGKILL to node i and waits for it to die.
func (s *supervisor) kill(i int) {
	p := s.nodes[i]
	p.serving.Store(false)
	if !p.running() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	s.events.add("killed %s (kill -9)", p.name)
}

// stopAll asks every node to leave (SIGTERM), and kills those still there
// after a grace period. It returns when every process has been waited for.
func (s *supervisor) stopAll(grace time.Duration) {
	for _, p := range s.nodes {
		p.serving.Store(false)
		if p.running() {
			p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(grace)
	for _, p := range s.nodes {
		if !p.running() {
			continue
		}
		select {
		case <-p.exited:
		case <-deadline:
			p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.exited
		}
	}
	s.wg.Wait()
}

// up is which nodes' processes are running.
func (s *supervisor) up() []bool {
	up := make([]bool, len(s.nodes))
	for i, p := range s.nodes {
		up[i] = p.running()
	}
	return up
}

// eventLog keeps the last few things that happened, for the view.
type eventLog struct {
	mu     sync.Mutex
	start  time.Time
	events []string
	total  int // events ever added
}

func newEventLog(start time.Time) *eventLog { return &eventLog{start: start} }

func (l *eventLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, fmt.Sprintf("%6.1fs  ", time.Since(l.start).Seconds())+fmt.Sprintf(format, args...))
	l.total++
	if len(l.events) > 100 {
		l.events = l.events[len(l.events)-100:]
	}
}

// last returns the n most recent events, oldest first.
func (l *eventLog) last(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) > n {
		return append([]string(nil), l.events[len(l.events)-n:]...)
	}
	return append([]string(nil), l.events...)
}

var errQuit = errors.New("quit")

// since returns the events added after the first seen (as far as they are
// still kept), and the count to pass next time.
func (l *eventLog) since(seen int) ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := min(l.total-seen, len(l.events))
	return append([]string(nil), l.events[len(l.events)-n:]...), l.total
}
