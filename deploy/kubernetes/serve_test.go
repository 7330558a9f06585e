package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// startApp starts the example on loopback with free ports and serves it;
// it returns the app and its base URL. The caller shuts it down.
func startApp(t *testing.T, c config) (*app, string, <-chan error) {
	t.Helper()
	return startAppLog(t, c, slog.New(slog.DiscardHandler))
}

// startAppLog is startApp logging to log.
func startAppLog(t *testing.T, c config, log *slog.Logger) (*app, string, <-chan error) {
	t.Helper()
	c.name = "t-" + strings.ReplaceAll(t.Name(), "/", "-")
	c.http, c.gossip, c.rpc = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, err := start(ctx, c, log)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.srv.Serve(a.ln) }()
	return a, "http://" + a.ln.Addr().String(), served
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// With no flags at all the example serves the probes and /metrics with
// ringlimit_ series, on the built-in rules.
func TestDefaults(t *testing.T) {
	c, err := parseFlags(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.http != ":8080" || c.rules != "" || len(c.valkey) != 0 || len(c.join) != 0 || len(c.trusted) != 0 {
		t.Fatalf("defaults: %+v", c)
	}
	a, base, served := startApp(t, c)
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := httpGet(t, base+p); code != http.StatusOK {
			t.Errorf("%s: %d %s", p, code, body)
		}
	}
	// The built-in login rule limits, and /metrics shows it.
	for i := range 6 {
		resp, err := http.Post(base+"/login", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 429}[i < 5]; resp.StatusCode != want {
			t.Fatalf("POST /login #%d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	code, body := httpGet(t, base+"/metrics")
	for _, want := range []string{"ringlimit_members 1", `ringlimit_http_requests_total{result="denied",rule="login"} 1`,
		"ringlimit_store_breaker_state", "go_goroutines"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("/metrics %d: no %q in\n%s", code, want, body)
		}
	}
	if err := a.shutdown(c, func(time.Duration) {}); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}

// SIGTERM: /readyz turns 503 first, while requests are still served and
// the node still decides; only after the drain does the node close (and
// hand its keys off).
func TestShutdownDrainsBeforeHandoff(t *testing.T) {
	c, err := parseFlags([]string{"-drain=7s"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	a, base, served := startApp(t, c)
	if code, _ := httpGet(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d before SIGTERM", code)
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Minute}
	var waited time.Duration
	err = a.shutdown(c, func(d time.Duration) {
		waited = d
		if code, _ := httpGet(t, base+"/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz %d while draining, want 503", code)
		}
		if code, _ := httpGet(t, base+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz %d while draining", code)
		}
		if code, body := httpGet(t, base+"/anything"); code != http.StatusOK {
			t.Errorf("a request while draining: %d %s", code, body)
		}
		if _, err := a.n.Allow(context.Background(), "k", rule); err != nil {
			t.Errorf("the node closed before the drain was over: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if waited != 7*time.Second {
		t.Errorf("drained for %v, -drain says 7s", waited)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
	if _, err := a.n.Allow(context.Background(), "k", rule); !errors.Is(err, ringlimit.ErrClosed) {
		t.Fatalf("after shutdown the node answers: %v", err)
	}
}

// Behind a trusted proxy each forwarded client has its own budget (the
// login rule: 5 per minute per ip); an untrusted peer's X-Forwarded-For is
// ignored, so all its requests share one.
func TestTrustedProxies(t *testing.T) {
	c, err := parseFlags([]string{"-trusted-proxies=10.0.0.0/8, 192.168.0.0/16"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/16")}; len(c.trusted) != 2 || c.trusted[0] != want[0] || c.trusted[1] != want[1] {
		t.Fatalf("trusted %v", c.trusted)
	}
	a, _, served := startApp(t, c)
	t.Cleanup(func() {
		a.shutdown(c, func(time.Duration) {})
		<-served
	})
	post := func(peer, xff string) int {
		req := httptest.NewRequest("POST", "/login", nil)
		req.RemoteAddr = peer + ":40000"
		req.Header.Set("X-Forwarded-For", xff)
		rec := httptest.NewRecorder()
		a.srv.Handler.ServeHTTP(rec, req)
		return rec.Code
	}
	for i := range 7 {
		if code := post("10.9.8.7", "203.0.113."+strconv.Itoa(i+1)); code != http.StatusOK {
			t.Fatalf("forwarded client %d via a trusted proxy: %d", i+1, code)
		}
	}
	denied := 0
	for i := range 7 {
		if post("172.16.0.1", "198.51.100."+strconv.Itoa(i+1)) == http.StatusTooManyRequests {
			denied++
		}
	}
	if denied != 2 {
		t.Fatalf("an untrusted peer's 7 requests: %d denied, want 2 (its X-Forwarded-For ignored)", denied)
	}
	if _, err := parseFlags([]string{"-trusted-proxies=10.0.0.0"}, func(string) string { return "" }); err == nil {
		t.Fatal("a proxy network without a prefix length accepted")
	}
}
