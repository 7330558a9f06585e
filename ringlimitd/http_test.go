package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/ringlimitd/internal/config"
	"github.com/ringlimit/ringlimit/ringlimitd/internal/rls"
)

func jsonServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := rls.New(local.New(local.Config{}), nil, nil)
	c, err := config.Load([]config.File{{Name: "c", Data: []byte(clusterConfig)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfig(c)
	srv := httptest.NewServer(jsonHandler(s))
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// TestJSON: /json speaks protojson's defaults, as envoyproxy/ratelimit's
// debug endpoint: lowerCamelCase names, enum names, 429 on OVER_LIMIT.
func TestJSON(t *testing.T) {
	srv := jsonServer(t)
	body := `{"domain":"api","hitsAddend":4,"descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`
	code, m := post(t, srv.URL, body)
	st := m["statuses"].([]any)[0].(map[string]any)
	if code != 200 || m["overallCode"] != "OK" || st["code"] != "OK" || st["limitRemaining"] != 3.0 ||
		st["currentLimit"].(map[string]any)["unit"] != "DAY" || st["durationUntilReset"] == nil {
		t.Fatalf("%d %v", code, m)
	}
	// proto names are accepted too
	code, m = post(t, srv.URL, `{"domain":"api","hits_addend":4,"descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`)
	if code != http.StatusTooManyRequests || m["overallCode"] != "OVER_LIMIT" {
		t.Fatalf("%d %v", code, m)
	}
	if src := m["dynamicMetadata"].(map[string]any)["ringlimit"].(map[string]any)["sources"].([]any)[0]; src != "local" {
		t.Fatalf("source %v", src)
	}
}

func TestJSONBadInput(t *testing.T) {
	srv := jsonServer(t)
	for _, tc := range []struct {
		body string
		code int
	}{
		{`{`, 400},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"j"}]}],"bogus":1}`, 400},
		{`{"domain":"","descriptors":[{"entries":[{"key":"user","value":"j"}]}]}`, 400},
		{`{"domain":"api"}`, 400},
		{`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"j"}],"isNegativeHits":true}]}`, 400}, // a refund: refused
		{`{"domain":"api","descriptors":[{"entries":[{"key":"` + strings.Repeat("k", rls.MaxEntryLen+1) + `"}]}]}`, 400},
		{`{"domain":"` + strings.Repeat("d", maxBody) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%.60s: %d, want %d", tc.body, resp.StatusCode, tc.code)
		}
	}
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"domain":"api","hitsAddend":4,"descriptors":[{"entries":[{"key":"user","value":"j"}],"hitsAddend":"3"}]}`))
	f.Add([]byte(`{"domain":"api","descriptors":[{"entries":[{"key":"a"}],"limit":{"requestsPerUnit":3,"unit":"SECOND"}}]}`))
	s := rls.New(local.New(local.Config{MaxKeys: 1000}), nil, nil)
	c, _ := config.Load([]config.File{{Name: "c", Data: []byte(clusterConfig)}}, false)
	s.SetConfig(c)
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeJSON(b)
		if err != nil {
			return
		}
		if _, err := s.Check(t.Context(), req); err != nil && !errors.Is(err, rls.ErrBadRequest) {
			t.Fatalf("valid request: %v", err)
		}
	})
}

func TestReadConfigDirectory(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: b\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\n"), 0o644)
	os.WriteFile(filepath.Join(dir, ".hidden"), []byte("not yaml: ["), 0o644)
	os.Mkdir(filepath.Join(dir, "..data"), 0o755)
	files, err := readConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || !strings.HasSuffix(files[0].Name, "a.yaml") || !bytes.Equal(files[1].Data, []byte("domain: b\n")) {
		t.Fatalf("%+v", files)
	}
	c, err := config.Load(files, false)
	if err != nil || c.Domains() != 2 {
		t.Fatalf("%v %v", c, err)
	}
	os.WriteFile(filepath.Join(dir, "c.yaml"), []byte("domain: a\n"), 0o644)
	files, _ = readConfig(dir)
	if _, err := config.Load(files, false); err == nil || !strings.Contains(err.Error(), "c.yaml: duplicate domain 'a'") {
		t.Fatalf("same domain in two files: %v", err)
	}
	if _, err := config.Load(files, true); err != nil {
		t.Fatalf("-merge-domains: %v", err)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMetricsHaveNoValues: the series name config domains and descriptor
// keys, never a request's values or an unknown domain.
func TestMetricsHaveNoValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := newObserver(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := rls.New(local.New(local.Config{}), nil, obs)
	c, _ := config.Load([]config.File{{Name: "c", Data: []byte(clusterConfig)}}, false)
	s.SetConfig(c)
	srv := httptest.NewServer(jsonHandler(s))
	defer srv.Close()
	post(t, srv.URL, `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"secret-value-1"}]},{"entries":[{"key":"nope","value":"secret-value-2"}]}]}`)
	post(t, srv.URL, `{"domain":"secret-domain","descriptors":[{"entries":[{"key":"user","value":"secret-value-3"}]}]}`)
	var b strings.Builder
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		b.WriteString(mf.String())
	}
	out := b.String()
	if strings.Contains(out, "secret") {
		t.Fatalf("a request's value or domain in the metrics:\n%s", out)
	}
	for _, want := range []string{`value:"user"`, `value:"api"`, `value:"unmatched"`, "ringlimitd_requests_total"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in the metrics:\n%s", want, out)
		}
	}
}
