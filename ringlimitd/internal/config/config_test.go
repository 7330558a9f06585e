package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// basic mirrors the shapes of envoyproxy/ratelimit's basic config test:
// a key/value with no limit of its own over a key-only default and a
// key/value override, a key-only default beside value overrides (one with
// no limit: an allow-list entry), a named limit, nested limits at two
// depths and an unlimited key.
const basic = `
domain: shop
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: path
        value: /login
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: client
    value: gold
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: client
    value: internal
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: user
    rate_limit: {name: per_user, unit: day, requests_per_unit: 1}
  - key: region
    value: eu
    rate_limit: {unit: day, requests_per_unit: 15}
    descriptors:
      - key: zone
        value: eu-1
        rate_limit: {unit: day, requests_per_unit: 25}
  - key: health
    rate_limit: {unlimited: true}
  - key: metered
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 70}
`

func load(t *testing.T, merge bool, files ...string) (*Config, error) {
	t.Helper()
	var fs []File
	for i, f := range files {
		fs = append(fs, File{Name: "f" + string(rune('0'+i)) + ".yaml", Data: []byte(f)})
	}
	return Load(fs, merge)
}

func es(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

func TestLookupBasic(t *testing.T) {
	c, err := load(t, false, basic)
	if err != nil {
		t.Fatal(err)
	}
	if c.Domain("other") != nil {
		t.Fatal("unknown domain found")
	}
	d := c.Domain("shop")
	for _, tc := range []struct {
		entries []Entry
		limit   uint32 // 0: no limit
		unit    Unit
		name    string
	}{
		{entries: nil},
		{entries: es("tenant", "other")},
		{entries: es("tenant", "acme")},            // no limit of its own
		{entries: es("client", "x", "sub", "y")},   // deeper than the config
		{entries: es("region", "eu", "zone", "x")}, // no default at depth 2
		{es("tenant", "acme", "path", "/x"), 5, Second, ""},
		{es("tenant", "acme", "path", "/login"), 10, Second, ""},
		{es("client", "anything"), 20, Minute, ""},
		{es("client", "gold"), 30, Minute, ""},
		{entries: es("client", "internal")}, // a value with no limit overrides the default
		{es("ip", "1.2.3.4"), 1, Hour, ""},
		{es("user", "bob"), 1, Day, "per_user"},
		{es("region", "eu"), 15, Day, ""},
		{es("region", "eu", "zone", "eu-1"), 25, Day, ""},
		{es("metered", "a"), 70, Minute, ""},
		{es("metered", "b"), 70, Minute, ""},
	} {
		l := d.Lookup(tc.entries)
		if tc.limit == 0 {
			if l != nil {
				t.Errorf("%v: got limit %+v, want none", tc.entries, *l)
			}
			continue
		}
		if l == nil {
			t.Errorf("%v: no limit, want %d/%v", tc.entries, tc.limit, tc.unit)
			continue
		}
		if l.RequestsPerUnit != tc.limit || l.Unit != tc.unit || l.Name != tc.name {
			t.Errorf("%v: got %d/%v %q, want %d/%v %q", tc.entries, l.RequestsPerUnit, l.Unit, l.Name, tc.limit, tc.unit, tc.name)
		}
		want := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: int64(tc.limit), Window: tc.unit.Duration()}
		if l.Rule != want {
			t.Errorf("%v: rule %+v, want %+v", tc.entries, l.Rule, want)
		}
	}
	if l := d.Lookup(es("health", "x")); l == nil || !l.Unlimited {
		t.Errorf("health: %+v, want unlimited", l)
	}
	if l := d.Lookup(es("tenant", "acme", "path", "/x")); l.Path != "tenant.path" {
		t.Errorf("path %q, want tenant.path", l.Path)
	}
}

func TestLookupWildcard(t *testing.T) {
	c, err := load(t, false, `
domain: w
descriptors:
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: exact
    value: foo
    rate_limit: {unit: minute, requests_per_unit: 21}
  - key: any
    rate_limit: {unit: minute, requests_per_unit: 22}
  - key: mid
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 23}
  - key: outer
    value: v
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: minute, requests_per_unit: 24}
`)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("w")
	for _, tc := range []struct {
		entries []Entry
		limit   uint32
	}{
		{es("wild", "foo1"), 20},
		{es("wild", "foo"), 20},
		{es("wild", "bar"), 0},
		{es("exact", "foo1"), 0}, // no eager match without "*"
		{es("any", "x"), 22},
		{es("mid", "barab"), 0}, // "*" only at the end
		{es("outer", "v", "wild", "goo2"), 24},
		{es("outer", "v", "wild", "foo2"), 0},
	} {
		l := d.Lookup(tc.entries)
		got := uint32(0)
		if l != nil {
			got = l.RequestsPerUnit
		}
		if got != tc.limit {
			t.Errorf("%v: limit %d, want %d", tc.entries, got, tc.limit)
		}
	}
}

func TestExtensions(t *testing.T) {
	c, err := load(t, false, `
domain: x
failure_mode_deny: true
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 30}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
  - key: z
    rate_limit: {unit: second, requests_per_unit: 0}
`)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("x")
	if !d.FailureModeDeny {
		t.Error("failure_mode_deny not read")
	}
	if r := d.Lookup(es("a", "1")).Rule; r != (ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 30}) {
		t.Errorf("a: %+v", r)
	}
	if r := d.Lookup(es("b", "1")).Rule; r.Algorithm != ringlimit.SlidingLog || r.Window != time.Minute {
		t.Errorf("b: %+v", r)
	}
	if l := d.Lookup(es("z", "1")); l.RequestsPerUnit != 0 || l.Rule != (ringlimit.Rule{}) {
		t.Errorf("z: %+v", l)
	}
}

func TestMerge(t *testing.T) {
	a := "domain: m\ndescriptors:\n  - key: k1\n    value: v1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"
	b := "domain: m\ndescriptors:\n  - key: k2\n    value: v2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n"
	if _, err := load(t, false, a, b); err == nil || !strings.Contains(err.Error(), "duplicate domain 'm'") {
		t.Fatalf("without merge: %v", err)
	}
	c, err := load(t, true, a, b)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Domain("m")
	if d.Lookup(es("k1", "v1")).RequestsPerUnit != 10 || d.Lookup(es("k2", "v2")).RequestsPerUnit != 20 {
		t.Error("merged domain lost a descriptor")
	}
	if _, err := load(t, true, a, a); err == nil || !strings.Contains(err.Error(), "duplicate descriptor composite key 'm.k1_v1'") {
		t.Fatalf("merge of a duplicate key: %v", err)
	}
}

// TestErrors pins the files envoyproxy/ratelimit rejects, with its
// messages, and where this server reports them.
func TestErrors(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"empty domain", "descriptors:\n  - key: a\n", "f0.yaml: config file cannot have empty domain"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "f0.yaml:3: descriptor has empty key"},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: k\n    value: v\n\n  - key: k\n    value: v\n", "f0.yaml:6: duplicate descriptor composite key 'd.k_v'"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n", "f0.yaml:3: invalid rate limit unit 'fortnight'"},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 5}\n", "invalid rate limit unit ''"},
		{"replaces self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: self\n      replaces: [{name: self}]\n      unit: second\n      requests_per_unit: 5\n", "replaces should not contain name of same descriptor"},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: a\n      replaces: [{name: ''}]\n      unit: second\n      requests_per_unit: 5\n", "should not have an empty replaces entry"},
		{"bad yaml", "domain: d\ndescriptors:\n  - key: k\n'''", "error loading config file"},
		{"misspelled key", "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: second}\n", "f0.yaml:4: config error, unknown key 'ratelimit'"},
		{"misspelled nested key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n", "f0.yaml:6: config error, unknown key 'requestsperunit'"},
		{"non-string key", "0.25: d\ndescriptors:\n  - key: k\n", "config error, key is not of type string: 0.25"},
		{"non-map list", "domain: d\ndescriptors:\n  - a\n  - b\n", "f0.yaml:3: config error, yaml file contains list of type other than map: a"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day, requests_per_unit: 5}\n", "should not specify rate limit unit when unlimited"},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5, algorithm: gcra}\n", "invalid algorithm 'gcra'"},
		{"burst on a window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5, burst: 9}\n", "only token_bucket and leaky_bucket have a burst"},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "share_threshold can only be used with wildcard values"},
		{"float leaf", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1.5}\n", "error checking config"},
		{"duplicate mapping key", "domain: d\ndomain: e\n", "f0.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, false, tc.file)
			if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestEmptyFileIsAnError(t *testing.T) {
	if _, err := load(t, false, ""); err == nil {
		t.Fatal("an empty file loaded")
	}
}

func TestReplacesRead(t *testing.T) {
	c, err := load(t, false, "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: b\n      replaces: [{name: a}, {name: c}]\n      unit: second\n      requests_per_unit: 5\n")
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Domain("d").Lookup(es("k", "v")); l.Name != "b" || strings.Join(l.Replaces, ",") != "a,c" {
		t.Fatalf("%+v", l)
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(basic))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: v*\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky_bucket, burst: 2}\n"))
	f.Add([]byte("domain: d\nfailure_mode_deny: true\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Load([]File{{Name: "fuzz.yaml", Data: b}}, true)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		for name := range c.domains {
			c.Domain(name).Lookup(es("k", "v", "k2", "v2"))
		}
	})
}
