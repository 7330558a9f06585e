package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// proc is one ringlimitd process of a test.
type proc struct {
	cmd    *exec.Cmd
	addrs  map[string]string // from its "serving" log line: grpc, http, gossip, peer
	mu     sync.Mutex
	stderr strings.Builder
	done   chan struct{}
	conn   *grpc.ClientConn
	client pb.RateLimitServiceClient
}

// startProc starts the binary with args and waits for its serving line.
func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	r, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan map[string]string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "serving" {
				a := map[string]string{}
				for _, k := range []string{"grpc", "http", "gossip", "peer"} {
					a[k], _ = m[k].(string)
				}
				serving <- a
			}
		}
		io.Copy(io.Discard, r)
	}()
	t.Cleanup(func() { p.stop(t) })
	select {
	case p.addrs = <-serving:
	case <-p.done:
		p.cmd.Wait()
		t.Fatalf("ringlimitd exited before serving:\n%s", p.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("ringlimitd did not serve within 30 s:\n%s", p.log())
	}
	p.conn, err = grpc.NewClient(p.addrs["grpc"], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.client = pb.NewRateLimitServiceClient(p.conn)
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// stop sends SIGTERM and waits for the process (it leaves its cluster).
func (p *proc) stop(t *testing.T) {
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("ringlimitd %s: %v\n%s", p.addrs["http"], err, p.log())
	}
}

func (p *proc) get(path string) (int, string) {
	resp, err := http.Get("http://" + p.addrs["http"] + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var binary string

// buildBinary builds ringlimitd once per test binary run.
func buildBinary(t *testing.T) string {
	t.Helper()
	if binary != "" {
		return binary
	}
	dir, err := os.MkdirTemp("", "ringlimitd-test")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ringlimitd")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	binary = bin
	return bin
}

const clusterConfig = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 7}
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 100}
`

// startCluster starts three processes joined to the first, with cfg, and
// waits until each sees three members and is ready.
func startCluster(t *testing.T, cfg string) ([]*proc, string) {
	t.Helper()
	bin := buildBinary(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("  "+strings.Repeat("ab", 32)+"\n"), 0o600)
	conf := filepath.Join(dir, "config.yaml")
	os.WriteFile(conf, []byte(cfg), 0o644)
	common := []string{"-gossip", "127.0.0.1:0", "-peer", "127.0.0.1:0", "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0",
		"-secret-file", secret, "-config", conf, "-gossip-timing", "fast"}
	ps := []*proc{startProc(t, bin, append([]string{"-name", "n0"}, common...)...)}
	for i := 1; i < 3; i++ {
		ps = append(ps, startProc(t, bin, append([]string{"-name", fmt.Sprint("n", i), "-join", ps[0].addrs["gossip"]}, common...)...))
	}
	for _, p := range ps {
		eventually(t, 30*time.Second, "three members and ready", func() bool {
			_, m := p.get("/metrics")
			code, _ := p.get("/readyz")
			return code == 200 && strings.Contains(m, "\nringlimit_members 3\n")
		})
	}
	return ps, conf
}

func request(hits uint32, kv ...string) *pb.RateLimitRequest {
	r := &pb.RateLimitRequest{Domain: "api", HitsAddend: hits}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptors = append(r.Descriptors, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}}})
	}
	return r
}

func skipNearMidnight(t *testing.T) {
	if now := time.Now().UTC(); now.Hour() == 23 && now.Minute() >= 58 {
		t.Skip("a day's window ends within two minutes: the counts would reset mid-test")
	}
}

// TestClusterOfThreeProcesses drives the Envoy protocol through a
// generated gRPC client against three ringlimitd processes on loopback:
// the same requests answered by any member give one exact limiter's
// answers, concurrently spread requests admit exactly the limit, and a
// request refused by one descriptor charges none of the others even when
// they live on other members.
func TestClusterOfThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	skipNearMidnight(t)
	ps, _ := startCluster(t, clusterConfig)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Sequential, round robin: remaining counts down 6..0 whoever answers.
	for i := range 9 {
		p := ps[i%3]
		resp, err := p.client.ShouldRateLimit(ctx, request(0, "user", "seq"))
		if err != nil {
			t.Fatal(err)
		}
		st := resp.Statuses[0]
		wantCode, wantLeft := pb.RateLimitResponse_OK, uint32(6-i)
		if i >= 7 {
			wantCode, wantLeft = pb.RateLimitResponse_OVER_LIMIT, 0
		}
		if resp.OverallCode != wantCode || st.Code != wantCode || st.LimitRemaining != wantLeft {
			t.Fatalf("call %d via %s: %v %v remaining %d, want %v remaining %d", i, p.addrs["http"], resp.OverallCode, st.Code, st.LimitRemaining, wantCode, wantLeft)
		}
		if st.CurrentLimit.GetRequestsPerUnit() != 7 || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_DAY {
			t.Fatalf("current_limit %v", st.CurrentLimit)
		}
	}

	// Concurrent, spread over the members: exactly the limit per key.
	const keys, callers, per = 6, 12, 3
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				for j := range per {
					key := fmt.Sprint("u", k)
					resp, err := ps[(c+j+k)%3].client.ShouldRateLimit(ctx, request(1, "user", key))
					if err != nil {
						t.Error(err)
						return
					}
					if resp.OverallCode == pb.RateLimitResponse_OK {
						mu.Lock()
						admitted[key]++
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	for k := range keys {
		if got := admitted[fmt.Sprint("u", k)]; got != 7 {
			t.Errorf("key u%d: admitted %d of %d calls, want exactly 7", k, got, callers*per)
		}
	}

	// All or nothing: "user full" is spent; requests that also name tenants
	// (on whichever members own them) are refused and charge no tenant.
	if _, err := ps[0].client.ShouldRateLimit(ctx, request(7, "user", "full")); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		resp, err := ps[i%3].client.ShouldRateLimit(ctx, request(1, "tenant", fmt.Sprint("t", i), "user", "full", "tenant", "shared"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("request %d: %v", i, resp)
		}
	}
	for i, p := range ps {
		resp, err := p.client.ShouldRateLimit(ctx, request(1, "tenant", "shared", "tenant", fmt.Sprint("t", i)))
		if err != nil {
			t.Fatal(err)
		}
		if a, b := resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining; a != uint32(99-i) || b != 99 {
			t.Fatalf("via %d: tenants' remaining %d and %d, want %d and 99: a refused request charged them", i, a, b, 99-i)
		}
	}
	// hits_addend above the capacity: OVER_LIMIT, not an error.
	resp, err := ps[1].client.ShouldRateLimit(ctx, request(8, "user", "big"))
	if err != nil || resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("hits 8 of 7: %v, %v", resp, err)
	}
	// Sources: some answers came from peers.
	sources := map[string]bool{}
	for i := range 12 {
		resp, err := ps[0].client.ShouldRateLimit(ctx, request(1, "tenant", fmt.Sprint("src", i)))
		if err != nil {
			t.Fatal(err)
		}
		sources[resp.DynamicMetadata.GetFields()["ringlimit"].GetStructValue().GetFields()["sources"].GetListValue().GetValues()[0].GetStringValue()] = true
	}
	if !sources["local"] || !sources["peer"] {
		t.Errorf("sources over 12 keys: %v, want local and peer", sources)
	}
}

// TestReload: a changed config takes effect on every member within 5 s; a
// bad one is reported with its file and line and the last good one stays.
func TestReload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	skipNearMidnight(t)
	ps, conf := startCluster(t, clusterConfig)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limitOf := func(p *proc, key string) uint32 {
		resp, err := p.client.ShouldRateLimit(ctx, request(1, key, "x"))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	bad := "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n"
	if err := os.WriteFile(conf, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		eventually(t, 5*time.Second, "the bad config reported", func() bool {
			return strings.Contains(p.log(), conf+":3: invalid rate limit unit 'fortnight'")
		})
		if got := limitOf(p, "user"); got != 7 {
			t.Fatalf("after a bad config: limit %d, want the last good 7", got)
		}
	}
	good := "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 3}\n  - key: new\n    rate_limit: {unit: day, requests_per_unit: 9}\n"
	if err := os.WriteFile(conf, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, p := range ps {
		eventually(t, 5*time.Second-time.Since(start), "the new config in force", func() bool { return limitOf(p, "new") == 9 })
	}
}
