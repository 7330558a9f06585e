package rls

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Reference is the envoyproxy/ratelimit version measured.
const Reference = "github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"

// The config both servers load. "load" is never exhausted during a run;
// "exact" is the exactness round's.
const benchConfig = `domain: bench
descriptors:
  - key: load
    rate_limit: {unit: hour, requests_per_unit: 100000000}
  - key: exact
    rate_limit: {unit: day, requests_per_unit: 500}
`

const instances = 3

// target is one server's three instances.
type target struct {
	name    string
	clients []pb.RateLimitServiceClient
	conns   []*grpc.ClientConn
}

func (tg *target) close() {
	for _, c := range tg.conns {
		c.Close()
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCmd starts cmd and stops it (SIGINT, then SIGKILL) at cleanup;
// its stderr goes to ours if logs is set.
func startCmd(t *testing.T, cmd *exec.Cmd, logs bool) {
	t.Helper()
	cmd.Stdout, cmd.Stderr = nil, nil
	if logs {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
}

func dial(t *testing.T, addr string) (*grpc.ClientConn, pb.RateLimitServiceClient) {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return c, pb.NewRateLimitServiceClient(c)
}

func call(key, value string) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{{
		Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}}
}

// waitServing polls until every client answers.
func waitServing(t *testing.T, tg *target) {
	t.Helper()
	for i, c := range tg.clients {
		deadline := time.Now().Add(60 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			resp, err := c.ShouldRateLimit(ctx, call("load", "probe"))
			cancel()
			if err == nil && resp.Statuses[0].CurrentLimit != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s instance %d does not serve: %v", tg.name, i, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func goBuild(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
}

func startRinglimitd(t *testing.T, redis string) *target {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ringlimitd")
	goBuild(t, "../../ringlimitd", "build", "-o", bin, ".")
	conf := filepath.Join(t.TempDir(), "bench.yaml")
	os.WriteFile(conf, []byte(benchConfig), 0o644)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), 0o600)
	tg := &target{name: "ringlimitd"}
	var first string
	for i := range instances {
		gossip := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		grpcAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		args := []string{"-name", fmt.Sprint("b", i), "-gossip", gossip, "-peer", "127.0.0.1:0", "-grpc", grpcAddr,
			"-http", "127.0.0.1:0", "-store", redis, "-config", conf, "-secret-file", secret, "-gossip-timing", "fast"}
		if i == 0 {
			first = gossip
		} else {
			args = append(args, "-join", first)
		}
		startCmd(t, exec.Command(bin, args...), false)
		c, cl := dial(t, grpcAddr)
		tg.conns, tg.clients = append(tg.conns, c), append(tg.clients, cl)
	}
	waitServing(t, tg)
	// Wait until the ring holds the three: an exact count needs one owner
	// per key.
	deadline := time.Now().Add(30 * time.Second)
	for !allPeersSeen(t, tg) {
		if time.Now().After(deadline) {
			t.Fatal("ringlimitd: the three did not form one ring")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return tg
}

// allPeersSeen reports whether calls from every instance have a peer
// source among 30 keys (so each sees others in its ring).
func allPeersSeen(t *testing.T, tg *target) bool {
	for _, c := range tg.clients {
		peers := 0
		for k := range 30 {
			resp, err := c.ShouldRateLimit(context.Background(), call("load", fmt.Sprint("ring", k)))
			if err != nil {
				return false
			}
			src := resp.DynamicMetadata.GetFields()["ringlimit"].GetStructValue().GetFields()["sources"].GetListValue().GetValues()[0].GetStringValue()
			if src == "peer" {
				peers++
			}
		}
		if peers < 10 { // about 20 of 30 with three members
			return false
		}
	}
	return true
}

func startReference(t *testing.T, redis string) *target {
	t.Helper()
	gobin := t.TempDir()
	cmd := exec.Command("go", "install", Reference)
	cmd.Dir = gobin
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s: %v\n%s", Reference, err, out)
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755)
	os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), []byte(benchConfig), 0o644)
	tg := &target{name: "envoyproxy/ratelimit"}
	for range instances {
		grpcPort := freePort(t)
		c := exec.Command(filepath.Join(gobin, "service_cmd"))
		c.Env = append(os.Environ(), "HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
			"PORT="+strconv.Itoa(freePort(t)), "GRPC_PORT="+strconv.Itoa(grpcPort), "DEBUG_PORT="+strconv.Itoa(freePort(t)),
			"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
			"USE_STATSD=false", "LOG_LEVEL=error", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis)
		startCmd(t, c, false) // without statsd it logs every timer
		conn, cl := dial(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort)))
		tg.conns, tg.clients = append(tg.conns, conn), append(tg.clients, cl)
	}
	waitServing(t, tg)
	return tg
}

// result is one run's figures.
type result struct {
	rate     float64
	p50, p99 time.Duration
	errors   int64
}

// load runs callers goroutines for d, caller i on instance i%3, each
// looping over its own keys.
func load(tg *target, callers int, d time.Duration) result {
	var wg sync.WaitGroup
	var errs atomic.Int64
	lats := make([][]time.Duration, callers)
	start := time.Now()
	stop := start.Add(d)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := tg.clients[i%instances]
			for j := 0; ; j++ {
				t0 := time.Now()
				if t0.After(stop) {
					return
				}
				_, err := c.ShouldRateLimit(context.Background(), call("load", fmt.Sprint("k", i, "-", j%1000)))
				if err != nil {
					errs.Add(1)
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) == 0 {
		return result{}
	}
	return result{rate: float64(len(all)) / el.Seconds(), p50: all[len(all)/2], p99: all[len(all)*99/100], errors: errs.Load()}
}

// exact sends 4× the "exact" limit for one key, 32 callers spread over the
// instances, and returns how many were admitted.
func exact(tg *target, key string) (int64, int64) {
	var ok, errs atomic.Int64
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 / 32 {
				resp, err := tg.clients[i%instances].ShouldRateLimit(context.Background(), call("exact", key))
				if err != nil {
					errs.Add(1)
					continue
				}
				if resp.OverallCode == pb.RateLimitResponse_OK {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load(), errs.Load()
}

// TestVersusEnvoyRatelimit is the comparison (see the package doc).
func TestVersusEnvoyRatelimit(t *testing.T) {
	if os.Getenv("RINGLIMIT_RLS") == "" {
		t.Skip("set RINGLIMIT_RLS=1 to build both servers and compare them (minutes)")
	}
	if valkeytest.Binary() == "" {
		t.Skip("no redis-server or valkey-server on PATH")
	}
	redis := valkeytest.Start(t)
	d := 5 * time.Second
	if s := os.Getenv("RINGLIMIT_RLS_DURATION"); s != "" {
		d, _ = time.ParseDuration(s)
	}
	targets := []*target{startRinglimitd(t, redis.Addr()), startReference(t, redis.Addr())}
	defer func() {
		for _, tg := range targets {
			tg.close()
		}
	}()
	type row struct {
		Server  string  `json:"server"`
		Callers int     `json:"callers"`
		Rate    float64 `json:"decisions_per_s"`
		P50     string  `json:"p50"`
		P99     string  `json:"p99"`
		Errors  int64   `json:"errors"`
	}
	var rows []row
	// Interleaved: each server's run beside the other's, twice.
	for round := range 2 {
		for _, callers := range []int{1, 32} {
			for _, tg := range targets {
				r := load(tg, callers, d)
				rows = append(rows, row{tg.name, callers, r.rate, r.p50.String(), r.p99.String(), r.errors})
				t.Logf("round %d  %-22s %2d callers: %8.0f decisions/s  p50 %-10v p99 %-10v errors %d", round, tg.name, callers, r.rate, r.p50, r.p99, r.errors)
			}
		}
	}
	w := bufio.NewWriter(os.Stdout)
	for _, tg := range targets {
		key := fmt.Sprint("x", time.Now().UnixNano())
		ok, errs := exact(tg, key)
		t.Logf("%-22s exactness: %d of 1984 calls admitted against a limit of 500 (%s), errors %d", tg.name, ok, map[bool]string{true: "exact", false: "NOT exact"}[ok == 500], errs)
	}
	b, _ := json.Marshal(rows)
	fmt.Fprintf(w, "rls-versus: %s\n", b)
	w.Flush()
}
