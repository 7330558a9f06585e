package main

import (
	"bufio"
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// structShim is struct.lua squeezed onto one line, so that a script's line
// numbers in error messages move by exactly one.
//
//go:embed struct.lua
var structLua string

func structShim() string {
	var b strings.Builder
	for _, line := range strings.Split(structLua, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte(' ')
	}
	b.WriteByte('\n')
	return b.String()
}

// embeddedStore is a Redis-compatible server: miniredis behind a small RESP
// front on a fixed loopback address. The demo runs it in a process of its own
// (runStore); tests run it in theirs. miniredis's Lua has no struct
// library, which ringlimit's scripts use, so the front prepends a pure-Lua one
// to every script it passes on (EVAL, EVAL_RO, SCRIPT LOAD) and maps the
// client's SHA1 of a script to the SHA1 of the script as loaded (EVALSHA,
// EVALSHA_RO). Read-only scripts run as plain ones: miniredis refuses TIME in
// them, which Redis allows. Replies pass through untouched.
//
// Keys never expire: miniredis counts TTLs down only when told to, in steps
// that would expire keys early, and a ringlimit key past its TTL decides as an
// absent one would, so keeping it changes no decision. The demo's few
// thousand keys fit.
//
// Stop drops every connection and every key, as killing a server with no
// persistence would; Start comes back on the same address, empty.
type embeddedStore struct {
	addr string
	shim string

	mu    sync.Mutex
	mini  *miniredis.Miniredis
	ln    net.Listener
	conns map[net.Conn]struct{}
	shas  map[string]string // client's SHA1 → SHA1 of shim+script
	wg    sync.WaitGroup
}

func newEmbeddedStore(addr string) *embeddedStore {
	return &embeddedStore{addr: addr, shim: structShim(), shas: map[string]string{}}
}

func (e *embeddedStore) Addr() string { return e.addr }

func (e *embeddedStore) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mini != nil
}

// Start starts the server, empty, on its address. Starting a running store
// does nothing.
func (e *embeddedStore) Start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mini != nil {
		return nil
	}
	mini := miniredis.NewMiniRedis()
	if err := mini.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("embedded store: %w", err)
	}
	var ln net.Listener
	var err error
	for range 50 { // the port may linger for a moment after Stop
		if ln, err = net.Listen("tcp", e.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		mini.Close()
		return fmt.Errorf("embedded store: %w", err)
	}
	e.mini, e.ln, e.conns = mini, ln, map[net.Conn]struct{}{}
	e.wg.Add(1)
	go e.accept(ln, mini.Addr())
	return nil
}

// Stop closes every connection and drops the data. Stopping a stopped store
// does nothing.
func (e *embeddedStore) Stop() error {
	e.mu.Lock()
	if e.mini == nil {
		e.mu.Unlock()
		return nil
	}
	e.ln.Close()
	for c := range e.conns {
		c.Close()
	}
	mini := e.mini
	e.mini, e.ln, e.conns = nil, nil, nil
	e.mu.Unlock()
	e.wg.Wait()
	mini.Close()
	return nil
}

// runStore is the hidden "store" subcommand: the embedded store on -addr, until
// SIGINT or SIGTERM. The supervisor kills it with SIGKILL to stop it (newStore
// says why it is a process of its own).
func runStore(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("store", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "loopback address to serve on, host:port")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		return errors.New("store: -addr is required")
	}
	// miniredis runs each script in a fresh Lua state: about 0.5 ms of CPU
	// a call, much of it garbage. Collecting a quarter as often cut that
	// by a quarter (0.53 to 0.40 ms a call, measured with the client in the
	// same process). The live heap is the demo's few thousand keys, so the
	// larger heap this allows stays small.
	debug.SetGCPercent(400)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	e := newEmbeddedStore(*addr)
	if err := e.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	return e.Stop()
}

func (e *embeddedStore) accept(ln net.Listener, backend string) {
	defer e.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", backend)
		if err != nil {
			c.Close()
			continue
		}
		e.mu.Lock()
		if e.conns == nil { // stopped meanwhile
			e.mu.Unlock()
			c.Close()
			b.Close()
			return
		}
		e.conns[c], e.conns[b] = struct{}{}, struct{}{}
		e.mu.Unlock()
		e.wg.Add(2)
		go func() { // replies, as they come
			defer e.wg.Done()
			io.Copy(c, b)
			c.Close()
		}()
		go func() { // commands, rewritten
			defer e.wg.Done()
			e.forward(b, c)
			b.Close()
			c.Close()
			e.mu.Lock()
			delete(e.conns, c)
			delete(e.conns, b)
			e.mu.Unlock()
		}()
	}
}

// forward reads commands (RESP arrays of bulk strings) from src and writes
// them, scripts rewritten, to dst.
func (e *embeddedStore) forward(dst io.Writer, src io.Reader) {
	r := bufio.NewReader(src)
	w := bufio.NewWriter(dst)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		e.rewrite(args)
		writeCommand(w, args)
		if r.Buffered() == 0 { // flush whatever has queued (pipelining)
			if w.Flush() != nil {
				return
			}
		}
	}
}

func (e *embeddedStore) rewrite(args []string) {
	if len(args) < 2 {
		return
	}
	switch cmd := strings.ToUpper(args[0]); cmd {
	case "EVAL", "EVAL_RO":
		args[0] = "EVAL" // see below
		args[1] = e.load(args[1])
	case "EVALSHA", "EVALSHA_RO":
		// miniredis refuses TIME in read-only scripts (Redis allows it), and
		// every ringlimit script may read TIME: run them as plain scripts.
		// remote's peeks write nothing anyway.
		args[0] = "EVALSHA"
		e.mu.Lock()
		if s, ok := e.shas[strings.ToLower(args[1])]; ok {
			args[1] = s
		}
		e.mu.Unlock()
	case "SCRIPT":
		if len(args) == 3 && strings.EqualFold(args[1], "LOAD") {
			args[2] = e.load(args[2])
		}
	}
}

// load returns the script with the shim before it, and remembers the SHA1s.
func (e *embeddedStore) load(script string) string {
	full := e.shim + script
	e.mu.Lock()
	e.shas[sha1Hex(script)] = sha1Hex(full)
	e.mu.Unlock()
	return full
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

var errProtocol = errors.New("embedded store: protocol error")

func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if len(line) == 0 || line[0] != '*' {
		return strings.Fields(line), nil // an inline command
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 || n > 1<<20 {
		return nil, errProtocol
	}
	args := make([]string, n)
	for i := range args {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		if len(line) == 0 || line[0] != '$' {
			return nil, errProtocol
		}
		size, err := strconv.Atoi(line[1:])
		if err != nil || size < 0 || size > 512<<20 {
			return nil, errProtocol
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func writeCommand(w *bufio.Writer, args []string) {
	fmt.Fprintf(w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(w, "$%d\r\n", len(a))
		w.WriteString(a)
		w.WriteString("\r\n")
	}
}
