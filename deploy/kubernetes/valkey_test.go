package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Valkey config of the manifests runs: a real server (valkey-server,
// else Debian's redis-server) started on it, with the Secret's auth.conf
// made as valkey.yaml's comment says, asks for the password, takes it, and
// has the memory policy, and its command line holds no password.
func TestValkeyConfigRuns(t *testing.T) {
	server := ""
	for _, name := range []string{"valkey-server", "redis-server"} {
		if p, err := exec.LookPath(name); err == nil {
			server = p
			break
		}
	}
	if server == "" {
		t.Skip("skipped: no valkey-server or redis-server on PATH (Debian: apt-get install redis-server)")
	}
	all := docs(t)
	vpod := dig(all["StatefulSet/valkey"], "spec", "template", "spec")
	var cmdline []string
	for _, a := range append(seq(dig(vpod, "containers", 0, "command")), seq(dig(vpod, "containers", 0, "args"))...) {
		cmdline = append(cmdline, str(a))
	}
	conf, _ := valkeyConfig(t, all, vpod, cmdline)
	text := str(dig(all["ConfigMap/valkey-config"], "data", "valkey.conf"))

	dir := t.TempDir()
	var b [16]byte
	rand.Read(b[:])
	pw := hex.EncodeToString(b[:])
	auth := filepath.Join(dir, "auth.conf")
	if err := os.WriteFile(auth, []byte("requirepass "+pw), 0o400); err != nil {
		t.Fatal(err)
	}
	text = strings.ReplaceAll(text, conf["include"], auth)
	cfgFile := filepath.Join(dir, "valkey.conf")
	if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	// Only what a test needs on top: a free loopback port, a scratch dir.
	cmd := exec.Command(server, cfgFile, "--port", port, "--bind", "127.0.0.1", "--dir", dir)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	var conn net.Conn
	deadline := time.Now().Add(20 * time.Second)
	for {
		if conn, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen on %s: %v\n%s", server, addr, err, out)
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, not a wait for an event
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	// do sends one command and returns its reply, an array's elements
	// joined by spaces.
	do := func(args ...string) string {
		fmt.Fprintf(conn, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(conn, "$%d\r\n%s\r\n", len(a), a)
		}
		var read func() string
		read = func() string {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			line = strings.TrimRight(line, "\r\n")
			switch line[0] {
			case '$':
				n, _ := strconv.Atoi(line[1:])
				if n < 0 {
					return ""
				}
				buf := make([]byte, n+2)
				if _, err := io.ReadFull(r, buf); err != nil {
					t.Fatal(err)
				}
				return string(buf[:n])
			case '*':
				n, _ := strconv.Atoi(line[1:])
				var parts []string
				for range n {
					parts = append(parts, read())
				}
				return strings.Join(parts, " ")
			}
			return line
		}
		return read()
	}
	if got := do("PING"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Errorf("PING without the password: %q, want NOAUTH", got)
	}
	if got := do("AUTH", pw); got != "+OK" {
		t.Fatalf("AUTH with the Secret's password: %q", got)
	}
	if got, want := do("CONFIG", "GET", "maxmemory-policy"), "maxmemory-policy "+conf["maxmemory-policy"]; got != want {
		t.Errorf("CONFIG GET maxmemory-policy: %q, want %q", got, want)
	}
	if got := do("CONFIG", "GET", "save"); got != "save " {
		t.Errorf("CONFIG GET save: %q, want no snapshots", got)
	}
	if line, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); err == nil && strings.Contains(string(line), pw) {
		t.Errorf("the password is on the server's command line")
	}
}
