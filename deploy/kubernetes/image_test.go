package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// docker runs the docker command, bounded by ctx, and returns its trimmed
// output.
func docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// The image deploy/image.sh builds (no registry: FROM scratch, a binary
// built here) starts with no arguments, mounts or environment; two of its
// containers on a private network form a cluster when the second joins the
// first; each serves /healthz, /readyz and /metrics on :8080, and stops
// cleanly on SIGTERM. Everything the test makes (image tag, network,
// containers) is removed at the end, each step bounded in time.
func TestImage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("skipped: no Docker daemon answers (docker info: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	var b [4]byte
	rand.Read(b[:])
	id := "ringlimit-imgtest-" + hex.EncodeToString(b[:])
	tag := id + ":test"
	cleanup := func(args ...string) {
		t.Cleanup(func() {
			cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
			defer ccancel()
			if _, err := docker(cctx, args...); err != nil {
				t.Logf("cleanup: %v", err)
			}
		})
	}

	// The build may compile the whole module cold: minutes on a busy 2-core
	// machine, so it has most of the test's time.
	build := exec.CommandContext(ctx, "sh", filepath.Join("..", "image.sh"), tag)
	build.Env = os.Environ()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("deploy/image.sh: %v\n%s", err, out)
	}
	cleanup("rmi", "--force", tag)
	if cfg, err := docker(ctx, "image", "inspect", "--format", "{{.Config.User}} {{json .Config.Entrypoint}} {{json .Config.Cmd}} {{len .RootFS.Layers}}", tag); err != nil {
		t.Fatal(err)
	} else if cfg != `65534:65534 ["/ringlimit-example"] null 1` {
		t.Errorf("image config %q: want user 65534, the binary as entrypoint, no arguments, one layer (FROM scratch)", cfg)
	}

	// OCI labels: source, the module's version, the licence.
	labels, err := docker(ctx, "image", "inspect", "--format", "{{json .Config.Labels}}", tag)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(labels), &got); err != nil {
		t.Fatalf("labels %s: %v", labels, err)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/ringlimit/ringlimit",
		"org.opencontainers.image.version":  ringlimit.Version,
		"org.opencontainers.image.licenses": "Apache-2.0",
	} {
		if got[k] != want {
			t.Errorf("image label %s = %q, want %q", k, got[k], want)
		}
	}
	checkTrimmed(ctx, t, tag)

	if _, err := docker(ctx, "network", "create", "--internal", id); err != nil {
		t.Fatal(err)
	}
	cleanup("network", "rm", id)
	a, b2 := id+"-a", id+"-b"
	// The first with nothing at all; the second told to join the first.
	for _, run := range [][]string{{a, tag}, {b2, tag, "-join=" + a + ":7946"}} {
		if _, err := docker(ctx, append([]string{"run", "--detach", "--name", run[0], "--network", id, "--read-only", "--cap-drop", "ALL"}, run[1:]...)...); err != nil {
			t.Fatal(err)
		}
		cleanup("rm", "--force", "--volumes", run[0])
	}
	base := map[string]string{}
	for _, c := range []string{a, b2} {
		ip, err := docker(ctx, "inspect", "--format", "{{(index .NetworkSettings.Networks \""+id+"\").IPAddress}}", c)
		if err != nil || ip == "" {
			t.Fatalf("%s's address: %q, %v", c, ip, err)
		}
		base[c] = "http://" + ip + ":8080"
	}

	client := &http.Client{Timeout: 5 * time.Second}
	fetch := func(url string) (int, string, string) {
		resp, err := client.Get(url)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header.Get("Content-Type")
	}
	// Poll until both see two members and are ready (a joiner is ready once
	// the members it found have pushed it its keys' states, or the hand-off
	// window is over). The deadline is generous: on a busy machine the
	// containers start in seconds, and gossip joins within one retry
	// interval (1 s) of the second's start.
	members := regexp.MustCompile(`(?m)^ringlimit_members 2$`)
	deadline := time.Now().Add(90 * time.Second)
	for _, c := range []string{a, b2} {
		for {
			code, body, _ := fetch(base[c] + "/metrics")
			ready, rbody, _ := fetch(base[c] + "/readyz")
			if code == http.StatusOK && members.MatchString(body) && ready == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				logs, _ := docker(ctx, "logs", "--tail", "20", c)
				t.Fatalf("%s: no cluster of two, or not ready: /readyz %d %s, /metrics %d\n%.2000s\nlogs:\n%s", c, ready, rbody, code, body, logs)
			}
			time.Sleep(200 * time.Millisecond) // a poll interval, not a wait for an event
		}
	}
	for _, c := range []string{a, b2} {
		if code, body, _ := fetch(base[c] + "/healthz"); code != http.StatusOK {
			t.Errorf("%s /healthz: %d %s", c, code, body)
		}
		code, body, ctype := fetch(base[c] + "/metrics")
		if code != http.StatusOK || !strings.HasPrefix(ctype, "text/plain") {
			t.Errorf("%s /metrics: %d %s", c, code, ctype)
		}
		for _, want := range []string{"# TYPE ringlimit_decisions_total counter", `ringlimit_store_breaker_state{shard=""} 0`,
			`ringlimit_http_requests_total{result="allowed",rule="login"} 0`, `ringlimit_peer_breaker_state{peer="`} {
			if !strings.Contains(body, want) {
				t.Errorf("%s /metrics: no %q", c, want)
			}
		}
	}

	// SIGTERM, one at a time as a rolling update does: the drain (2 s by
	// default), the hand-off, a graceful leave the other sees at once, and a
	// clean exit well within docker stop's 20 s.
	for i, c := range []string{b2, a} {
		if _, err := docker(ctx, "stop", "--time", "20", c); err != nil {
			t.Fatal(err)
		}
		if st, err := docker(ctx, "inspect", "--format", "{{.State.ExitCode}} {{.State.OOMKilled}}", c); err != nil || st != "0 false" {
			logs, _ := docker(ctx, "logs", "--tail", "20", c)
			t.Errorf("%s after SIGTERM: exit %q, %v\nlogs:\n%s", c, st, err, logs)
		}
		if i == 0 {
			// A graceful leave is seen in about 100 ms; a member that vanished
			// without one would take failure detection, 5-6 s under the LAN
			// preset. 3 s tells them apart with room for a busy machine.
			left := time.Now().Add(3 * time.Second)
			for {
				code, body, _ := fetch(base[a] + "/metrics")
				if code == http.StatusOK && strings.Contains(body, "\nringlimit_members 1\n") {
					break
				}
				if time.Now().After(left) {
					t.Errorf("%s still counts %s 3 s after its leave: /metrics %d", a, b2, code)
					break
				}
				time.Sleep(50 * time.Millisecond) // a poll interval, not a wait for an event
			}
		}
	}
}

// checkTrimmed copies the binary out of the image and checks that it was
// built with -trimpath and holds no path of the machine that built it: not
// the checkout, the module cache or the Go root.
func checkTrimmed(ctx context.Context, t *testing.T, tag string) {
	t.Helper()
	cid, err := docker(ctx, "create", tag)
	if err != nil {
		t.Fatal(err)
	}
	defer docker(context.Background(), "rm", cid)
	bin := filepath.Join(t.TempDir(), "ringlimit-example")
	if _, err := docker(ctx, "cp", cid+":/ringlimit-example", bin); err != nil {
		t.Fatal(err)
	}
	info, err := exec.CommandContext(ctx, "go", "version", "-m", bin).CombinedOutput()
	if err != nil || !strings.Contains(string(info), "-trimpath=true") {
		t.Errorf("go version -m: %v, no -trimpath=true:\n%s", err, info)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	paths := []string{root}
	for _, v := range []string{"GOMODCACHE", "GOROOT", "GOPATH"} {
		out, err := exec.CommandContext(ctx, "go", "env", v).Output()
		if p := strings.TrimSpace(string(out)); err == nil && p != "" {
			paths = append(paths, p)
		}
	}
	for _, p := range paths {
		if n := bytes.Count(data, []byte(p+"/")); n > 0 {
			t.Errorf("the binary holds %d paths under %s", n, p)
		}
	}
}

// The Dockerfile, for builders with a registry, makes the image image.sh
// makes: the same labels from the same VERSION build argument, and a
// -trimpath build.
func TestDockerfileMatchesImageScript(t *testing.T) {
	read := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(data), "\\\n", " ")
	}
	label := regexp.MustCompile(`(?m)^LABEL .*$`)
	script, file := read(filepath.Join("..", "image.sh")), read("Dockerfile")
	ls, lf := label.FindString(script), label.FindString(file)
	if ls == "" || strings.Join(strings.Fields(ls), " ") != strings.Join(strings.Fields(lf), " ") {
		t.Errorf("labels differ:\nimage.sh:   %s\nDockerfile: %s", ls, lf)
	}
	for _, want := range []string{"org.opencontainers.image.version=$VERSION", "org.opencontainers.image.licenses=Apache-2.0", "org.opencontainers.image.source="} {
		if !strings.Contains(ls, want) {
			t.Errorf("image.sh's labels lack %s", want)
		}
	}
	for name, text := range map[string]string{"image.sh": script, "Dockerfile": file} {
		if !strings.Contains(text, "ARG VERSION") || !strings.Contains(text, "go build -trimpath") {
			t.Errorf("%s: want ARG VERSION and go build -trimpath", name)
		}
	}
	if !strings.Contains(script, `--build-arg VERSION="$version"`) {
		t.Error("image.sh does not pass VERSION to docker build")
	}
}
