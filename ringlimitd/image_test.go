package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestImageTwoContainers builds the image with deploy/image.sh ringlimitd
// and runs two containers of it on a private network: each answers the
// Envoy protocol, they join each other, and calls spread over both admit
// exactly the limit. The image with no arguments is a lone, ready node.
func TestImageTwoContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image and runs containers")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker on this machine: the image test needs it")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skip("docker does not answer: the image test needs a running Docker Engine")
	}
	skipNearMidnight(t)
	tag := fmt.Sprintf("ringlimitd-test:%d", time.Now().UnixNano())
	if out, err := exec.Command("sh", "../deploy/image.sh", "ringlimitd", tag).CombinedOutput(); err != nil {
		t.Fatalf("deploy/image.sh ringlimitd: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("docker", "rmi", "-f", tag).Run() })
	net := strings.ReplaceAll(tag, ":", "-")
	docker(t, "network", "create", net)
	t.Cleanup(func() { exec.Command("docker", "network", "rm", net).Run() })

	var ips []string
	for i := range 3 {
		name := fmt.Sprint(net, "-", i)
		args := []string{"run", "-d", "--name", name, "--network", net}
		if i < 2 {
			dir := t.TempDir()
			os.Chmod(dir, 0o755) // the image runs as user 65534
			writeFile(t, dir+"/api.yaml", clusterConfig)
			args = append(args, "-v", dir+":/config:ro", tag, "-name", name, "-config", "/config", "-gossip-timing", "fast")
			if i == 1 {
				args = append(args, "-join", net+"-0:7946")
			}
		} else {
			args = append(args, tag) // no arguments: a lone node
		}
		docker(t, args...)
		t.Cleanup(func() {
			if t.Failed() {
				out, _ := exec.Command("docker", "logs", name).CombinedOutput()
				t.Logf("%s:\n%s", name, out)
			}
			exec.Command("docker", "rm", "-f", name).Run()
		})
		ips = append(ips, docker(t, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name))
	}
	for i, ip := range ips {
		want := "ringlimit_members 2"
		if i == 2 {
			want = "ringlimit_members 1"
		}
		eventually(t, 60*time.Second, ip+": ready with the members", func() bool {
			resp, err := http.Get("http://" + ip + ":8080/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			m, err := http.Get("http://" + ip + ":8080/metrics")
			if err != nil {
				return false
			}
			defer m.Body.Close()
			var b strings.Builder
			buf := make([]byte, 32<<10)
			for {
				n, err := m.Body.Read(buf)
				b.Write(buf[:n])
				if err != nil {
					break
				}
			}
			return resp.StatusCode == 200 && strings.Contains(b.String(), "\n"+want+"\n")
		})
	}
	var clients []pb.RateLimitServiceClient
	for _, ip := range ips[:2] {
		conn, err := grpc.NewClient(ip+":8081", grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients = append(clients, pb.NewRateLimitServiceClient(conn))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 4 {
				for j := range 2 {
					key := fmt.Sprint("c", k)
					resp, err := clients[(c+j+k)%2].ShouldRateLimit(ctx, request(1, "user", key))
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
	for k := range 4 {
		if got := admitted[fmt.Sprint("c", k)]; got != 7 {
			t.Errorf("key c%d: admitted %d of 16, want exactly 7", k, got)
		}
	}
}
