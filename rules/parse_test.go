package rules_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/rules"
)

func TestLoadArticle(t *testing.T) {
	s, err := rules.Load("testdata/article.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		limit int64
	}{{"/api/posts", 5}, {"/api/login", 10}}
	if s.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", s.Len(), len(want))
	}
	for i, w := range want {
		r := s.Rule(i)
		if r.Name != w.name || r.Match.Path != w.name || r.Match.Method != "" {
			t.Errorf("rule %d: name %q, match %+v; want %q on any method", i, r.Name, r.Match, w.name)
		}
		wantRule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: w.limit, Window: 60 * time.Second}
		if r.Rule != wantRule {
			t.Errorf("rule %d: %+v, want %+v", i, r.Rule, wantRule)
		}
		if r.Key.String() != "ip" {
			t.Errorf("rule %d: key %q, want the default ip", i, r.Key)
		}
		if r.Line != 4+3*i {
			t.Errorf("rule %d: line %d, want %d", i, r.Line, 4+3*i)
		}
	}
}

// The seed's text lost the article's indentation; as printed there it is not
// YAML (a list item after mapping keys), and Parse says where.
// The article prints its example with the indentation lost; it loads as
// printed, to the same rules as the indented form.
func TestParseArticleAsPrinted(t *testing.T) {
	const printed = "rules:\n- endpoint: /api/posts\nlimit: 5\nwindow: 60s\n- endpoint: /api/login\nlimit: 10\nwindow: 60s\n"
	s, err := rules.Parse([]byte(printed))
	if err != nil {
		t.Fatal(err)
	}
	indented, err := rules.Load("testdata/article.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 2 || indented.Len() != 2 {
		t.Fatalf("%d and %d rules, want 2", s.Len(), indented.Len())
	}
	for i := range 2 {
		a, b := s.Rule(i), indented.Rule(i)
		if a.Name != b.Name || a.Match != b.Match || a.Rule != b.Rule || a.Key.String() != b.Key.String() {
			t.Errorf("rule %d: printed %+v, indented %+v", i, a, b)
		}
	}
	if r := s.Lookup("/api/login"); r == nil || r.Rule.Limit != 10 || r.Rule.Window != time.Minute {
		t.Errorf("login rule: %+v", r)
	}
	// Broken YAML that re-indenting cannot save still reports its line.
	_, err = rules.Parse([]byte("rules:\n- endpoint: /a\nlimit: [5\n"))
	var e *rules.Error
	if !errors.As(err, &e) || !errors.Is(err, rules.ErrInvalid) || e.Line == 0 {
		t.Fatalf("err = %v, want an *Error with a line wrapping ErrInvalid", err)
	}
}

func TestLoadFull(t *testing.T) {
	s, err := rules.Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	login, free, up := s.Lookup("login"), s.Lookup("free-plan"), s.Lookup("uploads")
	if login == nil || free == nil || up == nil {
		t.Fatalf("rules missing: %v %v %v", login, free, up)
	}
	if login.Match.Method != "POST" || login.Rule.Algorithm != ringlimit.SlidingWindow {
		t.Errorf("login = %+v", login)
	}
	if free.Match.Header != "X-Plan" || free.Match.HeaderValue != "free" ||
		free.Key.String() != "header:X-Api-Key,route" || free.Rule.Burst != 20 || free.Rule.Window != time.Hour {
		t.Errorf("free-plan = %+v, key %q", free, free.Key)
	}
	if up.Key.Len() != 2 || up.Key.Part(0).Kind != rules.KeyIP || up.Key.Part(1).Kind != rules.KeyRoute ||
		up.Rule.Algorithm != ringlimit.LeakyBucket {
		t.Errorf("uploads = %+v", up)
	}
	if s.Lookup("nope") != nil {
		t.Error("Lookup found a rule that is not there")
	}
}

func TestParseErrors(t *testing.T) {
	const head = "rules:\n  - name: a\n    endpoint: /a\n" // lines 1-3
	for _, tc := range []struct {
		name, body string
		line       int
		text       string
		rule       bool // wraps ringlimit.ErrInvalidRule too
	}{
		{"unknown algorithm", "    algorithm: fastest\n    limit: 1\n    window: 1s\n", 4, `unknown algorithm "fastest"`, true},
		{"zero limit", "    limit: 0\n    window: 1s\n", 4, "limit 0 is not positive", true},
		{"negative burst", "    limit: 1\n    window: 1s\n    burst: -1\n", 6, "burst -1 is negative", true},
		{"bad window", "    limit: 1\n    window: sixty\n", 5, `window "sixty" is not a duration`, false},
		{"zero window", "    limit: 1\n    window: 0s\n", 5, "window 0s is not positive", true},
		{"window below 1ms", "    limit: 1\n    window: 1500us\n", 5, "whole number of milliseconds", true},
		{"limit not a number", "    limit: lots\n    window: 1s\n", 4, `limit "lots" is not an integer`, false},
		{"missing limit", "    window: 1s\n", 2, "limit is required", false},
		{"missing window", "    limit: 1\n", 2, "window is required", false},
		{"unknown field", "    limit: 1\n    window: 1s\n    colour: red\n", 6, `unknown field "colour"`, false},
		{"field twice", "    limit: 1\n    window: 1s\n    limit: 2\n", 6, `field "limit" given twice (first at line 4)`, false},
		{"bad key", "    key: ip,cookie\n    limit: 1\n    window: 1s\n", 4, `unknown part "cookie"`, false},
		{"ip twice", "    key: ip, ip\n    limit: 1\n    window: 1s\n", 4, `"ip" appears twice`, false},
		{"bad header name", "    key: \"header:X Y\"\n    limit: 1\n    window: 1s\n", 4, "not a valid header name", false},
		{"endpoint and path", "    match: {path: /b}\n    limit: 1\n    window: 1s\n", 3, "endpoint and match.path both given", false},
		{"duplicate name", "    limit: 1\n    window: 1s\n  - name: a\n    limit: 2\n    window: 1s\n", 6, `duplicate rule name "a" (first at line 2)`, false},
		{"derived duplicate", "    limit: 1\n    window: 1s\n  - endpoint: /x\n    limit: 1\n    window: 1s\n  - endpoint: /x\n    limit: 1\n    window: 1s\n", 9, `duplicate rule name "/x" (first at line 6)`, false},
		{"unnamed without path", "    limit: 1\n    window: 1s\n  - limit: 1\n    window: 1s\n", 6, "needs a name", false},
		{"bad name", "    limit: 1\n    window: 1s\n  - name: 'a:b'\n    limit: 1\n    window: 1s\n", 6, `name "a:b"`, false},
		{"syntax", "    limit: 1: 2\n", 4, "mapping values are not allowed", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rules.Parse([]byte(head + tc.body))
			var e *rules.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want an *rules.Error", err)
			}
			if e.Line != tc.line || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("err = %v (line %d); want line %d and %q", err, e.Line, tc.line, tc.text)
			}
			if !errors.Is(err, rules.ErrInvalid) {
				t.Errorf("err = %v does not wrap ErrInvalid", err)
			}
			if got := errors.Is(err, ringlimit.ErrInvalidRule); got != tc.rule {
				t.Errorf("errors.Is(err, ringlimit.ErrInvalidRule) = %v, want %v", got, tc.rule)
			}
		})
	}
}

func TestParseReportsEveryError(t *testing.T) {
	src := "rules:\n  - endpoint: /a\n    limit: 0\n    window: 1s\n  - endpoint: /b\n    limit: 1\n    window: 1d\n"
	_, err := rules.Parse([]byte(src))
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("err = %v, want several joined", err)
	}
	var lines []int
	for _, e := range j.Unwrap() {
		var re *rules.Error
		if errors.As(e, &re) {
			lines = append(lines, re.Line)
		}
	}
	if len(lines) != 2 || lines[0] != 3 || lines[1] != 7 {
		t.Errorf("error lines = %v, want [3 7]; err = %v", lines, err)
	}
}

func TestParseDocumentShape(t *testing.T) {
	for _, tc := range []struct {
		src  string
		ok   bool
		want int
	}{
		{"", false, 0},
		{"rules: []\n", true, 0},
		{"- endpoint: /a\n  limit: 1\n  window: 1s\n", true, 1},
		{"rule:\n  - endpoint: /a\n", false, 0},
		{"rules: 3\n", false, 0},
		{"rules:\n  - just a string\n", false, 0},
	} {
		s, err := rules.Parse([]byte(tc.src))
		if (err == nil) != tc.ok || tc.ok && s.Len() != tc.want {
			t.Errorf("Parse(%q) = %v rules, %v; want ok %v with %d", tc.src, s.Len(), err, tc.ok, tc.want)
		}
		if err != nil && !errors.Is(err, rules.ErrInvalid) {
			t.Errorf("Parse(%q): %v does not wrap ErrInvalid", tc.src, err)
		}
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - endpoint: /a\n    limit: 0\n    window: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := rules.Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), "rules: "+path+":3: ") {
		t.Errorf("err = %v, want it to start with the path and line 3", err)
	}
	if _, err := rules.Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want os.ErrNotExist", err)
	}
}
