package rules_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/ringlimit/ringlimit/rules"
)

func ExampleParse() {
	s, err := rules.Parse([]byte(`
rules:
  - endpoint: /api/posts
    limit: 5
    window: 60s
  - name: login
    match: {method: POST, path: /api/login}
    key: ip
    algorithm: sliding_window
    limit: 10
    window: 60s
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range s.Match(httptest.NewRequest("POST", "/api/login", nil)) {
		fmt.Println(r.Name, r.Key, r.Rule.Algorithm, r.Rule.Limit, r.Rule.Window)
	}
	// Output: login ip sliding_window 10 1m0s
}

func ExampleParse_errors() {
	_, err := rules.Parse([]byte("rules:\n  - endpoint: /a\n    limit: 0\n    window: 60s\n"))
	var e *rules.Error
	fmt.Println(errors.Is(err, rules.ErrInvalid), errors.As(err, &e) && e.Line == 3)
	fmt.Println(err)
	// Output:
	// true true
	// rules: line 3: ringlimit: invalid rule: limit 0 is not positive
}

func ExampleWatch() {
	dir, _ := os.MkdirTemp("", "rules")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rules.yaml")
	os.WriteFile(path, []byte("rules:\n  - endpoint: /api/posts\n    limit: 5\n    window: 60s\n"), 0o600)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the reloading goroutine
	w, err := rules.Watch(ctx, path, rules.WatchConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Hand w to httplimit.WithRules; each request sees w.Current().
	fmt.Println(w.Current().Rule(0).Name, w.Current().Rule(0).Rule.Limit)
	// Output: /api/posts 5
}
