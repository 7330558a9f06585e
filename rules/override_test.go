package rules_test

import (
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/rules"
)

const multiYAML = `
rules:
  - name: api
    key: header:X-Api-Key
    algorithm: sliding_window
    limits: [{limit: 10, window: 1s}, {limit: 1000, window: 24h, algorithm: fixed_window}]
    overrides:
      - match: {header: {X-Tier: gold}}
        limits: [{limit: 100, window: 1s}]
      - keys: [key-123]
        limits: [{limit: 1, window: 1s}]
      - keys: [key-123]
        match: {header: {X-Tier: gold}}
        limits: [{limit: 2, window: 1s}]
      - keys: [vip, key-123]
        match: {header: {X-Tier: platinum}}
        unlimited: true
  - name: single
    limit: 5
    window: 60s
`

func TestParseLimitsAndOverrides(t *testing.T) {
	s, err := rules.Parse([]byte(multiYAML))
	if err != nil {
		t.Fatal(err)
	}
	api := s.Lookup("api")
	want := []ringlimit.Rule{
		{Algorithm: ringlimit.SlidingWindow, Limit: 10, Window: time.Second},
		{Algorithm: ringlimit.FixedWindow, Limit: 1000, Window: 24 * time.Hour},
	}
	if !slices.Equal(api.Limits, want) || api.Rule != want[0] {
		t.Fatalf("api: Rule %+v Limits %+v, want %+v", api.Rule, api.Limits, want)
	}
	if len(api.Overrides) != 4 || api.Overrides[0].Header != "X-Tier" || api.Overrides[0].HeaderValue != "gold" ||
		api.Overrides[0].Limits[0] != (ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 100, Window: time.Second}) ||
		!api.Overrides[3].Unlimited || !slices.Equal(api.Overrides[3].Keys, []string{"vip", "key-123"}) {
		t.Fatalf("api overrides: %+v", api.Overrides)
	}
	single := s.Lookup("single")
	if len(single.Limits) != 1 || single.Limits[0] != single.Rule || single.Rule.Limit != 5 {
		t.Fatalf("single: Rule %+v Limits %+v", single.Rule, single.Limits)
	}
}

// Precedence: unlimited wins; then the most specific; then the first.
func TestOverridePrecedence(t *testing.T) {
	s, err := rules.Parse([]byte(multiYAML))
	if err != nil {
		t.Fatal(err)
	}
	api := s.Lookup("api")
	for _, c := range []struct {
		key, tier string
		want      int
	}{
		{"other", "", -1},      // nothing matches: the rule's limits
		{"other", "gold", 0},   // header only
		{"key-123", "", 1},     // keys beat nothing
		{"key-123", "gold", 2}, // keys and header beat keys alone and header alone
		{"key-123", "silver", 1},
		{"vip", "platinum", 3},     // unlimited
		{"key-123", "platinum", 3}, // unlimited wins over the keys-only override listed before it
		{"vip", "", -1},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.tier != "" {
			r.Header.Set("X-Tier", c.tier)
		}
		if got := api.OverrideFor(r, c.key); got != c.want {
			t.Errorf("key %q tier %q: override %d, want %d", c.key, c.tier, got, c.want)
		}
	}
}

func TestLimitsErrors(t *testing.T) {
	nine := strings.Repeat("{limit: 1, window: 1s}, ", 8) + "{limit: 1, window: 1s}"
	for name, doc := range map[string]string{
		"both forms":              "rules: [{name: a, limit: 1, window: 1s, limits: [{limit: 2, window: 1s}]}]",
		"empty limits":            "rules: [{name: a, limits: []}]",
		"too many limits":         "rules: [{name: a, limits: [" + nine + "]}]",
		"limit without window":    "rules: [{name: a, limits: [{limit: 2}]}]",
		"bad limit":               "rules: [{name: a, limits: [{limit: 0, window: 1s}]}]",
		"unknown limit field":     "rules: [{name: a, limits: [{limit: 1, window: 1s, rate: 3}]}]",
		"override without match":  "rules: [{name: a, limit: 1, window: 1s, overrides: [{limits: [{limit: 2, window: 1s}]}]}]",
		"override without limits": "rules: [{name: a, limit: 1, window: 1s, overrides: [{keys: [k]}]}]",
		"unlimited with limits":   "rules: [{name: a, limit: 1, window: 1s, overrides: [{keys: [k], unlimited: true, limits: [{limit: 2, window: 1s}]}]}]",
		"empty override key":      "rules: [{name: a, limit: 1, window: 1s, overrides: [{keys: [''], unlimited: true}]}]",
		"two override headers":    "rules: [{name: a, limit: 1, window: 1s, overrides: [{match: {header: {A: x, B: y}}, unlimited: true}]}]",
	} {
		if _, err := rules.Parse([]byte(doc)); !errors.Is(err, rules.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestNewSetLimits(t *testing.T) {
	k, _ := rules.ParseKeySpec("ip")
	one := ringlimit.Rule{Limit: 1, Window: time.Second}
	two := ringlimit.Rule{Limit: 2, Window: time.Minute}
	s, err := rules.NewSet(rules.Rule{Name: "a", Key: k, Rule: one}, rules.Rule{Name: "b", Key: k, Limits: []ringlimit.Rule{two, one}})
	if err != nil {
		t.Fatal(err)
	}
	if a := s.Lookup("a"); !slices.Equal(a.Limits, []ringlimit.Rule{one}) {
		t.Errorf("a: Limits %+v, want [Rule]", a.Limits)
	}
	if b := s.Lookup("b"); b.Rule != two {
		t.Errorf("b: Rule %+v, want Limits[0]", b.Rule)
	}
	if _, err := rules.NewSet(rules.Rule{Name: "c", Key: k, Rule: one, Limits: []ringlimit.Rule{two}}); !errors.Is(err, rules.ErrInvalid) {
		t.Errorf("Rule ≠ Limits[0]: %v, want ErrInvalid", err)
	}
}
