package ringlimit_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// The modules of this repository as a user meets them: in module mode, with
// no go.work, required at their release's version. Until that version is
// published, a user's go.mod reaches the checkout through replace lines, as
// these tests do.

// outsideProgram uses the core and grpclimit: a gRPC server whose calls are
// limited by grpclimit over a local limiter, and a client that calls it until
// it is refused.
const outsideProgram = `package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/local"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func main() {
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 2, Window: time.Hour}
	limit := grpclimit.New(local.New(local.Config{}), grpclimit.WithRule("health", rule), grpclimit.WithKey(grpclimit.Method))
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(limit.Unary()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := healthpb.NewHealthClient(conn)
	fmt.Print("ringlimit ", ringlimit.Version, ":")
	for range 3 {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Print(" ", status.Code(err))
	}
	fmt.Println()
}
`

// TestOutsideModule builds a module outside the repository that requires
// the core and grpclimit at v0.1.0, as a user's would (GOWORK=off, its own
// go.mod and go.sum), and runs a program that uses both.
func TestOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module with gRPC in it: not in -short")
	}
	dir := outsideModule(t, map[string]string{"main.go": outsideProgram})
	out := goRun(t, dir, "run", ".")
	want := "ringlimit " + ringlimit.Version + ": OK OK ResourceExhausted"
	if strings.TrimSpace(out) != want {
		t.Errorf("the program printed %q, want %q", strings.TrimSpace(out), want)
	}
}

// TestModulesBuildInModuleMode builds and vets each nested module of the
// repository in module mode (GOWORK=off), with a replace of the core added
// by hand (to a copy of its go.mod, through -modfile), as someone who
// checks a module out alone would. The core, which needs no replace, is
// vetted as it is.
func TestModulesBuildInModuleMode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every module: not in -short")
	}
	root := checkout(t)
	t.Run("core", func(t *testing.T) {
		goRun(t, root, "vet", "./...") // (vet type-checks every package and test; a build would add little)
	})
	for _, m := range nestedModules(t, root) {
		dir := filepath.Join(root, m)
		t.Run(m, func(t *testing.T) {
			tmp := t.TempDir()
			mod := filepath.Join(tmp, "go.mod")
			copyFile(t, filepath.Join(dir, "go.mod"), mod)
			copyFile(t, filepath.Join(dir, "go.sum"), filepath.Join(tmp, "go.sum"))
			goRun(t, dir, "mod", "edit", "-modfile="+mod, "-replace=github.com/ringlimit/ringlimit@v"+ringlimit.Version+"="+root)
			goRun(t, dir, "build", "-modfile="+mod, "./...")
			goRun(t, dir, "vet", "-modfile="+mod, "./...")
		})
	}
}

// nestedModules returns the folders (relative, slash-separated) of every
// go.mod in the tree but the root's, skipping testdata and hidden folders.
func nestedModules(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" && filepath.Dir(path) != root {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWorkspaceListsEveryModule: the go.work at the root uses every module
// of the tree, so that ./test.sh and a contributor build them together.
func TestWorkspaceListsEveryModule(t *testing.T) {
	root := checkout(t)
	work, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, line := range strings.Split(string(work), "\n") {
		if f := strings.TrimSpace(line); strings.HasPrefix(f, "./") || f == "." {
			used[strings.TrimPrefix(f, "./")] = true
		}
	}
	if !used["."] {
		t.Errorf("go.work does not use the core (.)")
	}
	mods := nestedModules(t, root)
	if len(mods) == 0 {
		t.Fatal("no nested module found: the walk is broken")
	}
	for _, m := range mods {
		if !used[m] {
			t.Errorf("go.work does not use ./%s", m)
		}
	}
}

// checkout returns the absolute path of the repository's root, where this
// package's tests run.
func checkout(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// outsideModule writes a module named example.com/user in a temporary
// folder, with files (path → content), whose go.mod requires the core and
// grpclimit at this release's version and replaces both with the checkout.
// Its go.sum holds the core's and grpclimit's sums, so it builds from the
// module cache when that has them.
func outsideModule(t *testing.T, files map[string]string) string {
	t.Helper()
	root := checkout(t)
	dir := t.TempDir()
	v := "v" + ringlimit.Version
	gomod := "module example.com/user\n\ngo 1.26.0\n\n" +
		"require (\n" +
		"\tgithub.com/ringlimit/ringlimit " + v + "\n" +
		"\tgithub.com/ringlimit/ringlimit/grpclimit " + v + "\n" +
		")\n\n" +
		"replace github.com/ringlimit/ringlimit " + v + " => " + root + "\n\n" +
		"replace github.com/ringlimit/ringlimit/grpclimit " + v + " => " + filepath.Join(root, "grpclimit") + "\n"
	files["go.mod"] = gomod
	var sums []string
	for _, f := range []string{"go.sum", "grpclimit/go.sum"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, strings.Split(strings.TrimSpace(string(b)), "\n")...)
	}
	slices.Sort(sums)
	files["go.sum"] = strings.Join(slices.Compact(sums), "\n") + "\n"
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goRun runs the go command in dir in module mode (GOWORK=off, -mod=mod
// added to GOFLAGS), from the module cache alone (GOPROXY=off) and, if that
// lacks a module, again through the proxy the environment names. It returns
// the command's standard output and fails the test if the command fails.
func goRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	run := func(extra ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, gobin, args...)
		cmd.Dir = dir
		flags := strings.TrimSpace(os.Getenv("GOFLAGS") + " -mod=mod") // (the user's flags kept)
		cmd.Env = append(os.Environ(), append([]string{"GOWORK=off", "GOFLAGS=" + flags}, extra...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	out, errOut, err := run("GOPROXY=off")
	if err != nil && strings.Contains(errOut, "GOPROXY=off") {
		t.Logf("go %s: the module cache lacks a module; trying the proxy", strings.Join(args, " "))
		out, errOut, err = run()
	}
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s%s", strings.Join(args, " "), dir, err, out, errOut)
	}
	return out
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
