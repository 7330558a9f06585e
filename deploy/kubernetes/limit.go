package main

import (
	"net"
	"sync"
	"sync/atomic"
)

// capListener is a net.Listener that keeps at most cap(slots) of its
// connections open at once. A connection accepted over the cap is closed at
// once, unread: its client sees the connection reset or closed and can try
// another replica, while the open ones, idle keep-alives included, keep
// their memory (about 20 KiB each: 15,000 idle keep-alives took 309 MiB)
// within a bound the pod's limit can take. Idle connections free their
// slots when the server's IdleTimeout closes them.
type capListener struct {
	net.Listener
	slots   chan struct{}
	refused atomic.Uint64 // connections closed for being over the cap
}

// capConns returns ln capped at n open connections (n ≥ 1).
func capConns(ln net.Listener, n int) *capListener {
	return &capListener{Listener: ln, slots: make(chan struct{}, n)}
}

// Accept returns the next connection within the cap, closing those over it.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &cappedConn{Conn: c, slots: l.slots}, nil
		default:
			l.refused.Add(1)
			c.Close()
		}
	}
}

// cappedConn gives its slot back on its first Close.
type cappedConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}
