package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// respConn is the least RESP2 client that can test the embedded store.
type respConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dialResp(t *testing.T, addr string) *respConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &respConn{c, bufio.NewReader(c), bufio.NewWriter(c)}
}

// do sends a command and returns its reply: a string, an int64, a []any, nil,
// or an error for an error reply.
func (r *respConn) do(t *testing.T, args ...string) any {
	t.Helper()
	writeCommand(r.w, args)
	if err := r.w.Flush(); err != nil {
		t.Fatal(err)
	}
	v, err := r.read()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (r *respConn) read() (any, error) {
	line, err := readLine(r.r)
	if err != nil || line == "" {
		return nil, fmt.Errorf("reply %q: %v", line, err)
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return fmt.Errorf("%s", line[1:]), nil
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		var out []any
		for range max(n, 0) {
			v, err := r.read()
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("reply %q", line)
}

func startEmbedded(t *testing.T) *embeddedStore {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	e := newEmbeddedStore(addr)
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop() })
	return e
}

// The shim packs and unpacks little-endian int64s exactly as Redis's struct
// library does, over the whole range the scripts use.
func TestEmbeddedStructShim(t *testing.T) {
	e := startEmbedded(t)
	c := dialResp(t, e.Addr())
	for _, v := range []int64{0, 1, -1, 255, 256, -256, 1<<31 + 7, -(1 << 40), 1<<53 - 1, -(1<<53 - 1), 1734500000123} {
		// Pack in Lua, compare with Go's bytes; unpack Go's bytes in Lua.
		want := string([]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), byte(v >> 32), byte(v >> 40), byte(v >> 48), byte(v >> 56)})
		got := c.do(t, "EVAL", "return struct.pack('<i8', tonumber(ARGV[1]))", "0", strconv.FormatInt(v, 10))
		if got != want {
			t.Errorf("pack %d = %q, want %q", v, got, want)
		}
		got = c.do(t, "EVAL", "local a, b, pos = struct.unpack('<i8i8', ARGV[1], 1) return {string.format('%d', a), string.format('%d', b), pos}", "0", want+want)
		if fmt.Sprint(got) != fmt.Sprintf("[%d %d 17]", v, v) {
			t.Errorf("unpack %d = %v", v, got)
		}
	}
	if got := c.do(t, "EVAL", "return struct.pack('>i4', 1)", "0"); !strings.Contains(fmt.Sprint(got), "unsupported format") {
		t.Errorf("an unsupported format: %v, want an error", got)
	}
}

// EVALSHA finds a script loaded by EVAL (under the client's SHA1, though the
// server holds the shimmed script), and a stopped and restarted store has
// forgotten its scripts and its keys, as a killed server would.
func TestEmbeddedEvalshaAndRestart(t *testing.T) {
	e := startEmbedded(t)
	script := "redis.call('SET', KEYS[1], struct.pack('<i8', 42), 'PX', 60000) return struct.unpack('<i8', redis.call('GET', KEYS[1]))"
	sha := sha1Hex(script)
	c := dialResp(t, e.Addr())
	if got := c.do(t, "EVALSHA", sha, "1", "k"); !strings.HasPrefix(fmt.Sprint(got), "NOSCRIPT") {
		t.Fatalf("EVALSHA before EVAL: %v, want NOSCRIPT", got)
	}
	if got := c.do(t, "EVAL", script, "1", "k"); got != int64(42) {
		t.Fatalf("EVAL: %v", got)
	}
	if got := c.do(t, "EVALSHA", sha, "1", "k"); got != int64(42) {
		t.Fatalf("EVALSHA: %v", got)
	}
	if got := c.do(t, "EVALSHA_RO", sha1Hex("return struct.pack('<i8', 7)"), "0"); !strings.HasPrefix(fmt.Sprint(got), "NOSCRIPT") {
		t.Fatalf("EVALSHA_RO of an unknown script: %v", got)
	}
	// remote's peeks read TIME in read-only scripts, which Redis allows and
	// miniredis by itself does not.
	peek := "return struct.unpack('<i8', struct.pack('<i8', tonumber(redis.call('TIME')[1])))"
	if got, ok := c.do(t, "EVAL_RO", peek, "0").(int64); !ok || got < 1e9 {
		t.Fatalf("EVAL_RO reading TIME: %v", got)
	}
	if got, ok := c.do(t, "EVALSHA_RO", sha1Hex(peek), "0").(int64); !ok || got < 1e9 {
		t.Fatalf("EVALSHA_RO reading TIME: %v", got)
	}
	if !e.Running() {
		t.Fatal("not running")
	}
	e.Stop()
	if e.Running() || ping(e.Addr()) {
		t.Fatal("still answering after Stop")
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	c = dialResp(t, e.Addr())
	if got := c.do(t, "EXISTS", "k"); got != int64(0) {
		t.Errorf("key after a restart: EXISTS = %v", got)
	}
	if got := c.do(t, "EVALSHA", sha, "1", "k"); !strings.HasPrefix(fmt.Sprint(got), "NOSCRIPT") {
		t.Errorf("EVALSHA after a restart: %v, want NOSCRIPT", got)
	}
}

// The demo's embedded store is a process of its own, a child of the
// supervisor, not goroutines beside the traffic generator's: Stop kills it
// and forgets its keys, and Start brings it back on the same address, empty.
func TestEmbeddedStoreProcess(t *testing.T) {
	bin := demoBinary(t)
	st, err := newStore("embedded", bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Stop() })
	if err := st.Start(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.Kind(), "embedded") || !st.Running() {
		t.Fatalf("store %q, running %t: want the embedded one, running", st.Kind(), st.Running())
	}
	if runtime.GOOS == "linux" {
		if kids := childrenOf(os.Getpid()); !slices.ContainsFunc(kids, isEmbeddedStore) {
			t.Errorf("children of the test: %v, none of them the embedded store", kids)
		}
	}
	c := dialResp(t, st.Addr())
	if got := c.do(t, "SET", "k", "v"); got != "OK" {
		t.Fatalf("SET: %v", got)
	}
	// A script that uses the struct shim: the front runs in the child too.
	if got := c.do(t, "EVAL", "return struct.unpack('<i8', struct.pack('<i8', 42))", "0"); got != int64(42) {
		t.Fatalf("EVAL with struct: %v", got)
	}
	st.Stop()
	if st.Running() || ping(st.Addr()) {
		t.Fatal("still answering after Stop")
	}
	if err := st.Start(); err != nil {
		t.Fatal(err)
	}
	c = dialResp(t, st.Addr())
	if got := c.do(t, "EXISTS", "k"); got != int64(0) {
		t.Errorf("key after a restart: EXISTS = %v", got)
	}
}
