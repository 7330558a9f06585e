package chaos

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

// Fixed ports come from below the kernel's ephemeral range (32768 and up
// on Linux by default), so that no outgoing connection can take a killed
// node's port before it restarts; each port is handed out once per run.
const (
	portLow  = 20000
	portHigh = 32000
)

var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// freeAddr returns a free loopback address that no other node of this run
// has; with udp, free for UDP too (the gossip port is both).
func freeAddr(t *testing.T, udp bool) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := portLow + rand.IntN(portHigh-portLow)
		if ports[port] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		if udp {
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				l.Close()
				continue
			}
			u.Close()
		}
		l.Close()
		ports[port] = true
		return addr
	}
	t.Fatal("no free port")
	return ""
}

// tail returns the end of a log file, for failure messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n" + string(b)
}
