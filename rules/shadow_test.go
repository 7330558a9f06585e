package rules_test

import (
	"errors"
	"testing"

	"github.com/ringlimit/ringlimit/rules"
)

func TestParseShadow(t *testing.T) {
	s, err := rules.Parse([]byte(`
rules:
  - name: new
    endpoint: /api/x
    limit: 5
    window: 1s
    shadow: true
  - name: old
    endpoint: /api/x
    limit: 5
    window: 1s
    shadow: False
  - name: default
    endpoint: /api/x
    limit: 5
    window: 1s
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"new": true, "old": false, "default": false} {
		if got := s.Lookup(name).Shadow; got != want {
			t.Errorf("%s: Shadow %v, want %v", name, got, want)
		}
	}
	_, err = rules.Parse([]byte("rules:\n  - endpoint: /x\n    limit: 5\n    window: 1s\n    shadow: maybe\n"))
	var e *rules.Error
	if !errors.Is(err, rules.ErrInvalid) || !errors.As(err, &e) || e.Line != 5 {
		t.Fatalf("shadow: maybe: %v, want ErrInvalid at line 5", err)
	}
}
