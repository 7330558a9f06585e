package bench

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The echo floors of BenchmarkForwardFloor (floor_test.go): a plain TCP
// echo on 127.0.0.1, one caller's sequential round trips on one connection,
// and floorCallers callers multiplexed on one connection.

// echoServer echoes every byte it reads on each connection, in the chunks
// it reads them.
type echoServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn // closed with the server: no test waits on a client that forgot its own
	done  bool
}

func startEcho(tb testing.TB) *echoServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			if s.done { // accepted as the server closed
				s.mu.Unlock()
				c.Close()
				return
			}
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		s.done = true
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) dial(tb testing.TB) net.Conn {
	c, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// seqFloor makes calls sequential round trips of one frame on c and
// returns their latencies.
func seqFloor(c net.Conn, calls int) ([]time.Duration, error) {
	frame := make([]byte, floorFrame)
	lat := make([]time.Duration, 0, calls)
	for i := range calls {
		binary.LittleEndian.PutUint64(frame, uint64(i))
		start := time.Now()
		if _, err := c.Write(frame); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, frame); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(start))
		if binary.LittleEndian.Uint64(frame) != uint64(i) {
			return nil, fmt.Errorf("call %d answered %d", i, binary.LittleEndian.Uint64(frame))
		}
	}
	return lat, nil
}

// muxClient multiplexes up to floorCallers callers on one connection: a
// caller queues its frame and kicks the writer, which writes whatever is
// queued in one Write (batching by opportunity: a lone call goes at once);
// the reader reads whatever has arrived in one read and hands each answer
// to the caller its id names.
type muxClient struct {
	c      net.Conn
	mu     sync.Mutex
	queued []byte
	kick   chan struct{}
	answer [floorCallers]chan [floorFrame]byte
	err    atomic.Pointer[error] // the reader's or writer's end
	wg     sync.WaitGroup
}

func newMuxClient(c net.Conn) *muxClient {
	m := &muxClient{c: c, kick: make(chan struct{}, 1)}
	for i := range m.answer {
		m.answer[i] = make(chan [floorFrame]byte, 1)
	}
	m.wg.Add(2)
	go m.write()
	go m.read()
	return m
}

func (m *muxClient) fail(err error) {
	m.err.CompareAndSwap(nil, &err)
	m.c.Close()
}

func (m *muxClient) write() {
	defer m.wg.Done()
	var out []byte
	for range m.kick {
		m.mu.Lock()
		out, m.queued = m.queued, out[:0]
		m.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		if _, err := m.c.Write(out); err != nil {
			m.fail(err)
			return
		}
	}
}

// read dispatches answers; when the connection ends it closes every
// caller's channel, so that no caller waits for an answer that cannot come.
func (m *muxClient) read() {
	defer m.wg.Done()
	defer func() {
		for _, c := range m.answer {
			close(c)
		}
	}()
	// Buffered, as any multiplexer reads: the answers to a batch arrive
	// together, and one read system call a frame would make the floor
	// slower than the link it is the floor of.
	r := bufio.NewReaderSize(m.c, 64<<10)
	var f [floorFrame]byte
	for {
		if _, err := io.ReadFull(r, f[:]); err != nil {
			m.fail(err)
			return
		}
		id := binary.LittleEndian.Uint32(f[:])
		if id >= floorCallers {
			m.fail(fmt.Errorf("answer for caller %d", id))
			return
		}
		m.answer[id] <- f
	}
}

// call sends caller id's frame (its first 4 bytes are overwritten with id)
// and returns the answer.
func (m *muxClient) call(id int, frame [floorFrame]byte) ([floorFrame]byte, error) {
	binary.LittleEndian.PutUint32(frame[:], uint32(id))
	m.mu.Lock()
	m.queued = append(m.queued, frame[:]...)
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default: // the writer is already kicked: it will take this frame too
	}
	a, ok := <-m.answer[id]
	if !ok {
		return a, *m.err.Load()
	}
	return a, nil
}

func (m *muxClient) close() {
	close(m.kick)
	m.c.Close()
	m.wg.Wait()
}

// muxFloor makes calls calls from floorCallers goroutines on m and returns
// the calls per second.
func muxFloor(m *muxClient, calls int) (float64, error) {
	var next atomic.Int64
	var bad atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for g := range floorCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var f [floorFrame]byte
			for i := next.Add(1); i <= int64(calls); i = next.Add(1) {
				binary.LittleEndian.PutUint64(f[8:], uint64(i))
				a, err := m.call(g, f)
				if err == nil && (binary.LittleEndian.Uint32(a[:]) != uint32(g) || binary.LittleEndian.Uint64(a[8:]) != uint64(i)) {
					err = fmt.Errorf("caller %d's call %d answered with another's frame", g, i)
				}
				if err != nil {
					e := err // on the heap only when it fails: the loop allocates nothing
					bad.CompareAndSwap(nil, &e)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := bad.Load(); p != nil {
		return 0, *p
	}
	return float64(calls) / time.Since(start).Seconds(), nil
}
