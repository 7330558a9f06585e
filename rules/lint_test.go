package rules_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/rules"
)

// An override matched by a header alone lifts the limits of any client that
// sends the header: it is valid, but Parse and NewSet warn about it, with
// its line. One that also names keys (the header only narrows it), or names
// keys alone, draws no warning.
func TestHeaderOverrideWarns(t *testing.T) {
	s, err := rules.Parse([]byte(multiYAML))
	if err != nil {
		t.Fatal(err)
	}
	ws := s.Warnings()
	if len(ws) != 1 {
		t.Fatalf("%d warnings, want 1 (override 0 of api): %v", len(ws), ws)
	}
	w := ws[0]
	if w.Rule != "api" || w.Line != 8 || w.File != "" {
		t.Errorf("warning at rule %q line %d file %q, want api, 8, none", w.Rule, w.Line, w.File)
	}
	for _, want := range []string{"line 8", `"api"`, "override 0", "X-Tier", "any client"} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("warning %q lacks %q", w, want)
		}
	}

	quiet, err := rules.Parse([]byte(`
rules:
  - name: api
    key: header:X-Api-Key
    limit: 10
    window: 1s
    overrides:
      - keys: [key-123]
        unlimited: true
      - keys: [key-456]
        match: {header: {X-Tier: gold}}
        limits: [{limit: 100, window: 1s}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if ws := quiet.Warnings(); len(ws) != 0 {
		t.Errorf("overrides on keys: warnings %v", ws)
	}

	// Rules built in Go are linted too.
	ip, err := rules.ParseKeySpec("ip")
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.NewSet(rules.Rule{Name: "api", Key: ip,
		Rule:      ringlimit.Rule{Limit: 10, Window: time.Second},
		Overrides: []rules.Override{{Header: "X-Tier", HeaderValue: "gold", Unlimited: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if ws := set.Warnings(); len(ws) != 1 || !strings.Contains(ws[0].String(), "unlimited") {
		t.Errorf("NewSet: warnings %v, want one about the unlimited header override", ws)
	}
	var none *rules.Set
	if none.Warnings() != nil {
		t.Errorf("a nil Set has warnings")
	}
}

// The Watcher logs a loaded Set's warnings at level Warn, with the file's
// path and line: at the first load, and at each reload that has them.
func TestWatcherLogsWarnings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	header := "rules:\n  - name: api\n    limit: 10\n    window: 1s\n    overrides:\n      - match: {header: {X-Tier: gold}}\n        unlimited: true\n"
	keys := strings.Replace(header, "match: {header: {X-Tier: gold}}", "keys: [key-123]", 1)
	if err := os.WriteFile(path, []byte(header), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := rules.NewWatcher(path, rules.WatchConfig{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	warns := regexp.MustCompile(`level=WARN .*X-Tier`)
	if n := len(warns.FindAllString(buf.String(), -1)); n != 1 || !strings.Contains(buf.String(), path+":6") {
		t.Fatalf("first load: %d warnings logged, want 1 at %s:6:\n%s", n, path, buf.String())
	}
	for i, c := range []struct {
		content string
		logged  int
	}{{keys, 1}, {header, 2}} {
		if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if changed, err := w.Reload(); !changed || err != nil {
			t.Fatalf("reload %d: changed %t, %v", i, changed, err)
		}
		if n := len(warns.FindAllString(buf.String(), -1)); n != c.logged {
			t.Errorf("after reload %d: %d warnings logged, want %d:\n%s", i, n, c.logged, buf.String())
		}
	}
}

// The README's override example passes the lint: it must not teach an
// override that any client can claim.
func TestREADMEOverrideExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(readme, -1) {
		if !bytes.Contains(m[1], []byte("overrides:")) {
			continue
		}
		found++
		s, err := rules.Parse(m[1])
		if err != nil {
			t.Errorf("README example does not parse: %v\n%s", err, m[1])
			continue
		}
		if ws := s.Warnings(); len(ws) != 0 {
			t.Errorf("README example draws warnings %v:\n%s", ws, m[1])
		}
	}
	if found == 0 {
		t.Fatal("no override example in the README")
	}
}
