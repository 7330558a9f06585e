package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// keepAlive opens a connection to addr and makes one keep-alive request on
// it; it returns the connection, idle and open, or the error of a
// connection the server would not serve.
func keepAlive(t *testing.T, addr string) (net.Conn, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /healthz: %d, close %v", resp.StatusCode, resp.Close)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// Past -max-conns, a new connection is closed unserved while the idle
// keep-alives hold every slot; once one of them closes, a new one is served.
func TestConnCap(t *testing.T) {
	c, err := parseFlags([]string{"-max-conns=3"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	a, base, served := startApp(t, c)
	t.Cleanup(func() {
		a.shutdown(c, func(time.Duration) {})
		<-served
	})
	addr := strings.TrimPrefix(base, "http://")
	var held []net.Conn
	for i := range 3 {
		conn, err := keepAlive(t, addr)
		if err != nil {
			t.Fatalf("connection %d of 3: %v", i+1, err)
		}
		defer conn.Close()
		held = append(held, conn)
	}
	for i := range 2 {
		if conn, err := keepAlive(t, addr); err == nil {
			conn.Close()
			t.Fatalf("connection %d over the cap of 3 was served", i+1)
		}
	}
	if n := a.ln.refused.Load(); n != 2 {
		t.Errorf("%d connections refused, want 2", n)
	}
	// The server sees the close when its reader does: poll until a slot is
	// free.
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := keepAlive(t, addr)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after a held connection closed, a new one is still refused: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // a poll interval, not a wait for an event
	}
}

// An idle keep-alive connection is closed by the server after -idle-timeout.
func TestIdleTimeout(t *testing.T) {
	c, err := parseFlags([]string{"-idle-timeout=100ms"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	a, base, served := startApp(t, c)
	t.Cleanup(func() {
		a.shutdown(c, func(time.Duration) {})
		<-served
	})
	conn, err := keepAlive(t, strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Without an idle timeout the read below would wait for its deadline.
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle connection: read %d, %v; want the server's close (EOF)", n, err)
	}
}

// A replica alone with no store closes with states nobody took: it says
// they are dropped (node's own line, at Info), not that they "go to the
// store".
func TestStorelessShutdownLog(t *testing.T) {
	var buf bytes.Buffer
	c, err := parseFlags(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	a, base, served := startAppLog(t, c, slog.New(slog.NewJSONHandler(&buf, nil)))
	resp, err := http.Post(base+"/login", "text/plain", nil) // a key with state
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := a.shutdown(c, func(time.Duration) {}); err != nil {
		t.Fatal(err)
	}
	<-served
	log := buf.String()
	if strings.Contains(log, "go to the store") {
		t.Errorf("a warning that states go to the store, with no store:\n%s", log)
	}
	if !strings.Contains(log, `"level":"INFO","msg":"node: closing: key states dropped`) {
		t.Errorf("no line that the states are dropped:\n%s", log)
	}
}
