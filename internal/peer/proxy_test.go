package peer

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
)

// Directions through a proxy.
const (
	toServer = 0
	toClient = 1
)

// proxy relays peer connections on loopback between clients and a server:
// the handshake untouched, then record by record through fault, which
// returns what to send in place of the record (nothing: drop it). It keeps
// every byte it forwards.
type proxy struct {
	ln     net.Listener
	target string
	fault  func(dir, i int, rec []byte) [][]byte

	mu      sync.Mutex
	wire    [2][]byte
	conns   []net.Conn
	wg      sync.WaitGroup
	records [2]int
}

func startProxy(t *testing.T, target string, fault func(dir, i int, rec []byte) [][]byte) *proxy {
	p := &proxy{ln: listen(t), target: target, fault: fault}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(toServer, c, s)
		go p.pump(toClient, s, c)
	}
}

// pump relays from src to dst in direction dir.
func (p *proxy) pump(dir int, src, dst net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	send := func(b []byte) bool {
		p.mu.Lock()
		p.wire[dir] = append(p.wire[dir], b...)
		p.mu.Unlock()
		_, err := dst.Write(b)
		return err == nil
	}
	read := func(n int) []byte {
		b := make([]byte, n)
		if _, err := io.ReadFull(src, b); err != nil {
			return nil
		}
		return b
	}
	// The handshake.
	if dir == toServer {
		if b := read(len(magic) + 1 + nonceLen + 32); b == nil || !send(b) {
			return
		}
	} else {
		g := read(len(magic) + 1 + nonceLen + 1)
		if g == nil {
			return
		}
		name := read(int(g[len(g)-1]))
		if name == nil || !send(append(g, name...)) {
			return
		}
		if b := read(32); b == nil || !send(b) {
			return
		}
	}
	for i := 0; ; i++ {
		h := read(4)
		if h == nil {
			return
		}
		body := read(int(binary.BigEndian.Uint32(h)))
		if body == nil {
			return
		}
		p.mu.Lock()
		p.records[dir]++
		p.mu.Unlock()
		out := [][]byte{append(h, body...)}
		if p.fault != nil {
			out = p.fault(dir, i, out[0])
		}
		for _, r := range out {
			if !send(r) {
				return
			}
		}
	}
}

// captured returns the bytes forwarded in direction dir.
func (p *proxy) captured(dir int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.wire[dir]...)
}
