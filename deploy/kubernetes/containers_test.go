package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// shBlocks returns the ```sh blocks of a Markdown file, in order.
func shBlocks(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	return out
}

// The container quick start of docs/containers.md works as written: its
// sh blocks (build the images; start a store and three nodes; try them;
// clean up) run in order from the repository's root, the cluster forms,
// and the six logins print five 200s and a 429. So that it can run beside
// other tests and users, the names it makes (images, network, containers)
// get a random prefix and the host ports 8081-8083 become free ones; the
// commands are otherwise the document's.
func TestContainerQuickStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("skipped: no Docker daemon answers (docker info: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	for _, tool := range []string{"curl", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipped: the quick start uses %s, not on PATH", tool)
		}
	}
	blocks := shBlocks(t, filepath.Join("..", "..", "docs", "containers.md"))
	if len(blocks) != 4 {
		t.Fatalf("docs/containers.md has %d sh blocks, want 4 (build, start, try, clean up)", len(blocks))
	}
	var b [4]byte
	rand.Read(b[:])
	id := "rlqs" + hex.EncodeToString(b[:])
	repl := []string{
		"ringlimit-example:0.1.0", id + "-example:test",
		"ringlimit-store:local", id + "-store:test",
		"ringlimit-demo", id + "-net",
		"rl-", id + "-",
	}
	for _, port := range []string{"8081", "8082", "8083"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, free, _ := net.SplitHostPort(ln.Addr().String())
		ln.Close()
		repl = append(repl, port, free)
	}
	r := strings.NewReplacer(repl...)
	for i := range blocks {
		blocks[i] = r.Replace(blocks[i])
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	sh := func(ctx context.Context, script string) (string, error) {
		cmd := exec.CommandContext(ctx, "sh", "-eu", "-c", script)
		cmd.Dir = root
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer ccancel()
		// Whatever is left if a step failed; nothing if the last block ran.
		sh(cctx, "docker rm -f "+id+"-n1 "+id+"-n2 "+id+"-n3 "+id+"-store >/dev/null 2>&1; docker network rm "+id+"-net >/dev/null 2>&1; true")
		if out, err := sh(cctx, "docker rmi --force "+id+"-example:test "+id+"-store:test"); err != nil {
			t.Logf("cleanup: %v\n%s", err, out)
		}
	})

	// The build may compile every dependency cold: most of the time.
	if out, err := sh(ctx, blocks[0]); err != nil {
		t.Fatalf("build:\n%s\n%v\n%s", blocks[0], err, out)
	}
	if out, err := sh(ctx, blocks[1]); err != nil {
		t.Fatalf("start:\n%s\n%v\n%s", blocks[1], err, out)
	}
	// The try block waits for the cluster in its own loop: bound it.
	tctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
	out, err := sh(tctx, blocks[2])
	tcancel()
	if err != nil || !strings.Contains(out, "200 200 200 200 200 429") || !strings.Contains(out, "ringlimit_decisions_total{") {
		logs, _ := sh(ctx, "for c in "+id+"-n1 "+id+"-n2 "+id+"-n3; do docker logs --tail 10 $c 2>&1; done")
		t.Fatalf("try:\n%s\n%v\n%s\nwant the logins 200 200 200 200 200 429 and the decisions\nlogs:\n%s", blocks[2], err, out, logs)
	}
	if out, err := sh(ctx, blocks[3]); err != nil {
		t.Fatalf("clean up:\n%s\n%v\n%s", blocks[3], err, out)
	}
}
