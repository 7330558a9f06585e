package netchaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/valkeytest"
)

// Every container, network and image a run makes carries label (so a sweep
// finds them) and pidLabel with the test process's pid (so a sweep removes
// only the leftovers of runs whose process is gone).
const (
	label    = "ringlimit.netchaos"
	pidLabel = "ringlimit.netchaos.pid"
)

// dockerTimeout bounds one docker command.
const dockerTimeout = 60 * time.Second

// docker runs the docker CLI and returns its trimmed output.
func docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	s := strings.TrimSpace(string(out))
	if err != nil {
		return s, fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, s)
	}
	return s, nil
}

// mustDocker runs docker and fails the test on error.
func mustDocker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := docker(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// requireDocker skips the test, saying why, unless a Docker daemon answers
// and the test can enter containers' network namespaces (root, nsenter,
// iptables on PATH).
func requireDocker(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("netchaos: skipped: no docker CLI on PATH (the container scenarios need a Docker daemon)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("netchaos: skipped: no Docker daemon answers (docker info: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	if os.Geteuid() != 0 {
		t.Skip("netchaos: skipped: not root (faults are injected with nsenter and iptables in the containers' network namespaces)")
	}
	for _, tool := range []string{"nsenter", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("netchaos: skipped: no %s on PATH (apt-get install util-linux iptables)", tool)
		}
	}
}

// sweep removes the containers, networks and images of earlier runs whose
// process is gone (a run killed before its cleanup).
func sweep(t testing.TB) {
	t.Helper()
	stale := func(pid string) bool {
		p, err := strconv.Atoi(pid)
		if err != nil || p <= 0 {
			return true
		}
		return p != os.Getpid() && errors.Is(syscall.Kill(p, 0), syscall.ESRCH)
	}
	filter := "label=" + label
	if out, err := docker("ps", "-a", "--filter", filter, "--format", `{{.ID}} {{.Label "`+pidLabel+`"}}`); err == nil {
		for _, line := range lines(out) {
			if id, pid, _ := strings.Cut(line, " "); stale(pid) {
				t.Logf("netchaos: removing leftover container %s (run %s)", id, pid)
				_, _ = docker("rm", "-f", id)
			}
		}
	}
	if out, err := docker("network", "ls", "--filter", filter, "--format", `{{.ID}} {{.Label "`+pidLabel+`"}}`); err == nil {
		for _, line := range lines(out) {
			if id, pid, _ := strings.Cut(line, " "); stale(pid) {
				t.Logf("netchaos: removing leftover network %s (run %s)", id, pid)
				_, _ = docker("network", "rm", id)
			}
		}
	}
	if out, err := docker("images", "--filter", filter, "--format", "{{.Repository}}:{{.Tag}}"); err == nil {
		for _, ref := range lines(out) {
			// Tags are p<pid>.
			_, tag, _ := strings.Cut(ref, ":")
			if stale(strings.TrimPrefix(tag, "p")) {
				t.Logf("netchaos: removing leftover image %s", ref)
				_, _ = docker("rmi", "-f", ref)
			}
		}
	}
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// labels returns the docker flags that label a thing this run makes.
func labels() []string {
	return []string{"--label", label + "=1", "--label", pidLabel + "=" + strconv.Itoa(os.Getpid())}
}

// images are the two images a run builds, and the host binary that delays
// packets (nfdelay).
type images struct{ node, store, nfdelay string }

// buildImages builds the node image (chaosnode, static) and the store image
// (the host's redis-server or valkey-server and the libraries it links,
// FROM scratch), and removes both when the test ends.
func buildImages(t *testing.T) images {
	t.Helper()
	tag := ":p" + strconv.Itoa(os.Getpid())
	im := images{node: "ringlimit-netchaos-node" + tag, store: "ringlimit-netchaos-store" + tag}

	buildNodeImage(t, "../chaos/chaosnode", "", im.node)
	im.nfdelay = filepath.Join(t.TempDir(), "nfdelay")
	cmd := exec.Command("go", "build", "-o", im.nfdelay, "./nfdelay")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build nfdelay: %v\n%s", err, out)
	}

	bin := valkeytest.Binary()
	if bin == "" {
		t.Fatal("netchaos: neither valkey-server nor redis-server is on PATH; run ./test.sh, which installs redis-server")
	}
	// Keep the name: Debian's redis-server is a link to redis-check-rdb,
	// which acts on the name it was started by.
	sdir := t.TempDir()
	files := []string{bin}
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", bin, err)
	}
	for _, l := range lines(string(out)) {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
		f := strings.Fields(l)
		for i, w := range f {
			if strings.HasPrefix(w, "/") && (i == 0 || f[i-1] == "=>") {
				files = append(files, w)
			}
		}
	}
	for _, f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(sdir, "root", f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(sdir, "Dockerfile"), fmt.Sprintf("FROM scratch\nCOPY root/ /\nENTRYPOINT [%q]\n", bin))
	t.Cleanup(func() { _, _ = docker("rmi", "-f", im.store) })
	mustDocker(t, append(append([]string{"build", "-q", "-t", im.store}, labels()...), sdir)...)
	return im
}

// buildNodeImage builds chaosnode static (CGO_ENABLED=0) from the package
// pkg, a path relative to dir (the go command's working directory; "": this
// package's), into an image FROM scratch tagged tag, and removes the image
// when the test ends.
func buildNodeImage(t testing.TB, pkg, dir, tag string) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(out, "chaosnode"), pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if dir != "" {
		cmd.Env = append(cmd.Env, "GOWORK=off") // another tree: its own go.mod only
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build chaosnode (%s): %v\n%s", tag, err, b)
	}
	writeFile(t, filepath.Join(out, "Dockerfile"), "FROM scratch\nCOPY chaosnode /chaosnode\nENTRYPOINT [\"/chaosnode\"]\n")
	t.Cleanup(func() { _, _ = docker("rmi", "-f", tag) })
	mustDocker(t, append(append([]string{"build", "-q", "-t", tag}, labels()...), out)...)
}

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// network is a private Docker network the test made: internal (no route
// out), on a /24 the test chose, removed when the test ends.
type network struct {
	name   string
	prefix string // "10.77.5." : hosts are prefix+N
}

func newNetwork(t *testing.T) *network {
	t.Helper()
	name := fmt.Sprintf("ringlimit-netchaos-%d-%d", os.Getpid(), rand.IntN(1e6))
	var err error
	for range 20 { // a /24 another network holds: try another
		prefix := fmt.Sprintf("10.%d.%d.", 180+rand.IntN(60), rand.IntN(256))
		args := append([]string{"network", "create", "--internal", "--subnet", prefix + "0/24"}, labels()...)
		if _, err = docker(append(args, name)...); err == nil {
			nw := &network{name: name, prefix: prefix}
			t.Cleanup(func() { _, _ = docker("network", "rm", name) })
			return nw
		}
	}
	t.Fatalf("netchaos: no free subnet for a network: %v", err)
	return nil
}

func (nw *network) ip(host int) string { return nw.prefix + strconv.Itoa(host) }

// container is one container the test made (removed when the test ends).
type container struct {
	name string
	ip   string
}

// runContainer starts a container on nw at ip, with flags added to docker
// run's, removed (with -f) when the test ends.
func runContainer(t testing.TB, nw *network, name, ip string, flags, env []string, image string, args ...string) *container {
	t.Helper()
	a := append([]string{"run", "-d", "--name", name, "--network", nw.name, "--ip", ip}, labels()...)
	a = append(a, flags...)
	for _, e := range env {
		a = append(a, "-e", e)
	}
	a = append(a, image)
	t.Cleanup(func() { _, _ = docker("rm", "-f", name) })
	mustDocker(t, append(a, args...)...)
	return &container{name: name, ip: ip}
}

// pid is the host pid of the container's first process (0 if not running).
func (c *container) pid() (int, error) {
	out, err := docker("inspect", "-f", "{{.State.Pid}}", c.name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(out)
}

// inNetns runs a command in the container's network namespace, from the
// host: the images carry no tools.
func (c *container) inNetns(args ...string) error {
	pid, err := c.pid()
	if err != nil {
		return err
	}
	if pid == 0 {
		return fmt.Errorf("netchaos: %s is not running", c.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := append([]string{"-t", strconv.Itoa(pid), "-n"}, args...)
	if out, err := exec.CommandContext(ctx, "nsenter", a...).CombinedOutput(); err != nil {
		return fmt.Errorf("nsenter %s: %w: %s", strings.Join(a, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// iptables adds rules in the container's network namespace; each rule is
// the arguments after "iptables".
func (c *container) iptables(t testing.TB, rules ...[]string) {
	t.Helper()
	for _, r := range rules {
		if err := c.inNetns(append([]string{"iptables", "-w"}, r...)...); err != nil {
			t.Fatal(err)
		}
	}
}

// flush removes every rule this test added in the container's namespace.
func (c *container) flush(t testing.TB) {
	t.Helper()
	c.iptables(t, []string{"-F", "INPUT"}, []string{"-F", "OUTPUT"})
}

// logs returns the end of the container's output, for failure messages.
func (c *container) logs() string {
	out, _ := docker("logs", "--tail", "40", c.name)
	return "\n" + out
}
