package rules_test

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/rules"
)

var oneSec = ringlimit.Rule{Limit: 1, Window: time.Second}

func ipKey(t *testing.T) rules.KeySpec {
	t.Helper()
	k, err := rules.ParseKeySpec("ip")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestMatchPath(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"", "/anything", true},
		{"/", "/", true},
		{"/", "/a/b", true},
		{"/api/posts", "/api/posts", true},
		{"/api/posts", "/api/posts/", false},
		{"/api/posts", "/api/post", false},
		{"/api/posts", "/api/posts/1", false},
		{"/api/posts", "/api", false},
		{"/api/", "/api/", true},
		{"/api/", "/api/posts/1", true},
		{"/api/", "/api", false},
		{"/api/", "/apix/", false},
		{"/users/{id}/posts", "/users/42/posts", true},
		{"/users/{id}/posts", "/users//posts", false},
		{"/users/{id}/posts", "/users/42/posts/x", false},
		{"/users/{id}/posts", "/users/42", false},
		{"/files/{rest...}", "/files/", true},
		{"/files/{rest...}", "/files/a/b/c", true},
		{"/files/{rest...}", "/files", false},
	} {
		s, err := rules.NewSet(rules.Rule{Name: "r", Match: rules.Match{Path: tc.pattern}, Key: ipKey(t), Rule: oneSec})
		if err != nil {
			t.Fatalf("pattern %q: %v", tc.pattern, err)
		}
		r := httptest.NewRequest("GET", "http://x"+tc.path, nil)
		if got := len(s.Match(r)) == 1; got != tc.want {
			t.Errorf("pattern %q, path %q: matched %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}

func TestBadPatterns(t *testing.T) {
	for _, p := range []string{"api", "/a//b", "/{rest...}/x", "/a/{}", "/a{id}", "/{...}", "/a/{x{y}}"} {
		_, err := rules.NewSet(rules.Rule{Name: "r", Match: rules.Match{Path: p}, Key: ipKey(t), Rule: oneSec})
		if !errors.Is(err, rules.ErrInvalid) {
			t.Errorf("pattern %q: err = %v, want ErrInvalid", p, err)
		}
	}
}

func TestMatchMethodAndHeader(t *testing.T) {
	s, err := rules.NewSet(
		rules.Rule{Name: "post", Match: rules.Match{Method: "post"}, Key: ipKey(t), Rule: oneSec},
		rules.Rule{Name: "has-plan", Match: rules.Match{Header: "x-plan"}, Key: ipKey(t), Rule: oneSec},
		rules.Rule{Name: "free", Match: rules.Match{Header: "X-Plan", HeaderValue: "free"}, Key: ipKey(t), Rule: oneSec},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, plan string
		want         []string
	}{
		{"GET", "", nil},
		{"POST", "", []string{"post"}},
		{"GET", "paid", []string{"has-plan"}},
		{"POST", "free", []string{"post", "has-plan", "free"}},
	} {
		r := httptest.NewRequest(tc.method, "/", nil)
		if tc.plan != "" {
			r.Header.Set("X-Plan", tc.plan)
		}
		var got []string
		for _, m := range s.Match(r) {
			got = append(got, m.Name)
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s plan %q: matched %v, want %v", tc.method, tc.plan, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s plan %q: matched %v, want %v", tc.method, tc.plan, got, tc.want)
			}
		}
	}
}

func TestAppendMatchAllocatesNothing(t *testing.T) {
	s, err := rules.Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/users/7/uploads/a/b", nil)
	var buf [4]*rules.Rule
	if n := len(s.AppendMatch(buf[:0], r)); n != 1 {
		t.Fatalf("matched %d rules, want 1", n)
	}
	if a := testing.AllocsPerRun(100, func() { s.AppendMatch(buf[:0], r) }); a != 0 {
		t.Errorf("AppendMatch allocates %v times per call, want 0", a)
	}
}

func TestNewSetErrors(t *testing.T) {
	k := ipKey(t)
	for name, rs := range map[string][]rules.Rule{
		"duplicate name": {{Name: "a", Key: k, Rule: oneSec}, {Name: "a", Key: k, Rule: oneSec}},
		"no name":        {{Key: k, Rule: oneSec}},
		"no key":         {{Name: "a", Rule: oneSec}},
		"bad rule":       {{Name: "a", Key: k}},
		"value, no name": {{Name: "a", Key: k, Rule: oneSec, Match: rules.Match{HeaderValue: "x"}}},
	} {
		if _, err := rules.NewSet(rs...); !errors.Is(err, rules.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

func TestKeySpec(t *testing.T) {
	for in, want := range map[string]string{
		"ip":                      "ip",
		"route":                   "route",
		" ip , route ":            "ip,route",
		"header:x-api-key":        "header:X-Api-Key",
		"header:A,header:B,ip":    "header:A,header:B,ip",
		"":                        "",
		"header:":                 "",
		"ip,ip":                   "",
		"header:a,header:A":       "",
		"cookie:session":          "",
		"header:x-api-key,route ": "header:X-Api-Key,route",
	} {
		k, err := rules.ParseKeySpec(in)
		if want == "" {
			if !errors.Is(err, rules.ErrInvalid) {
				t.Errorf("ParseKeySpec(%q) = %q, %v; want ErrInvalid", in, k, err)
			}
			continue
		}
		if err != nil || k.String() != want {
			t.Errorf("ParseKeySpec(%q) = %q, %v; want %q", in, k, err, want)
		}
	}
}
