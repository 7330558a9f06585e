// Package config reads envoyproxy/ratelimit's YAML configuration, as that
// project reads it, into rules for ringlimit: one file per domain,
// descriptors nested by key and optional value (a value ending in "*"
// matches every value with that prefix), each with an optional rate_limit.
//
// Beyond that format it accepts three keys: algorithm and burst inside a
// rate_limit, and failure_mode_deny at a domain's top level. Like the
// reference, it checks key names anywhere in a file against one set of
// known keys (a misplaced known key is ignored, an unknown one is an
// error).
//
// A Config is immutable once Load returns it and safe for simultaneous use.
package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit"
	"go.yaml.in/yaml/v3"
)

// ErrConfig is wrapped by every error Load returns.
var ErrConfig = errors.New("ringlimitd: config")

// MaxFileSize is the largest config file Load reads.
const MaxFileSize = 4 << 20

// Unit is a rate limit's unit, as envoy.service.ratelimit.v3 numbers it.
type Unit int32

// The units, numbered as RateLimitResponse.RateLimit.Unit numbers them.
const (
	Unknown Unit = 0
	Second  Unit = 1
	Minute  Unit = 2
	Hour    Unit = 3
	Day     Unit = 4
	Month   Unit = 5
	Year    Unit = 6
	Week    Unit = 7
)

var unitNames = map[string]Unit{
	"SECOND": Second, "MINUTE": Minute, "HOUR": Hour, "DAY": Day,
	"WEEK": Week, "MONTH": Month, "YEAR": Year,
}

// Duration is the unit's length, as envoyproxy/ratelimit counts it: a
// month is 30 days and a year 365. Unknown is 0.
func (u Unit) Duration() time.Duration {
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// String is the unit's upper-case name.
func (u Unit) String() string {
	for k, v := range unitNames {
		if v == u {
			return k
		}
	}
	return "UNKNOWN"
}

// Limit is a descriptor's rate_limit.
type Limit struct {
	RequestsPerUnit uint32
	Unit            Unit
	Unlimited       bool
	ShadowMode      bool
	QuotaMode       bool
	Name            string
	Replaces        []string
	// Rule is what ringlimit applies: Algorithm (default FixedWindow),
	// Limit = RequestsPerUnit, Window = the unit, Burst.
	Rule ringlimit.Rule
	// Path is the matched config descriptor's keys, joined by "." (no
	// values): the label of the per-descriptor metrics.
	Path string
}

// File is one config file's name and contents.
type File struct {
	Name string
	Data []byte
}

// Config is a loaded set of domains.
type Config struct {
	domains map[string]*Domain
}

// Domain is one domain's descriptors.
type Domain struct {
	Name            string
	FailureModeDeny bool
	root            descriptor
}

type descriptor struct {
	children map[string]*descriptor
	limit    *Limit
	wildcard []string // children keys ending in "*", in file order
}

// Domain returns the named domain, or nil.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Domains is the number of domains.
func (c *Config) Domains() int {
	if c == nil {
		return 0
	}
	return len(c.domains)
}

// validKeys are the keys envoyproxy/ratelimit accepts anywhere in a file,
// and this server's three extensions.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true,
	"unlimited": true, "shadow_mode": true, "quota_mode": true,
	"name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true,
	// extensions
	"algorithm": true, "burst": true, "failure_mode_deny": true,
}

type yamlReplaces struct {
	Name string `yaml:"name"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
	Algorithm       string         `yaml:"algorithm"`
	Burst           int64          `yaml:"burst"`
}

type yamlDescriptor struct {
	line           int
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
}

// UnmarshalYAML records the descriptor's line.
func (d *yamlDescriptor) UnmarshalYAML(n *yaml.Node) error {
	type plain yamlDescriptor
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*d = yamlDescriptor(p)
	d.line = n.Line
	return nil
}

type yamlRoot struct {
	Domain          string           `yaml:"domain"`
	Descriptors     []yamlDescriptor `yaml:"descriptors"`
	FailureModeDeny bool             `yaml:"failure_mode_deny"`
}

// Load reads files in order into one Config. A domain in two files is an
// error unless merge is set (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG):
// the later file's descriptors then join the earlier's, a composite key
// in both still being an error, and failure_mode_deny holds if any file
// sets it. Every error wraps ErrConfig and names the file and, where it
// can, the line.
func Load(files []File, merge bool) (*Config, error) {
	c := &Config{domains: map[string]*Domain{}}
	for _, f := range files {
		if err := c.load(f, merge); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func fail(file string, line int, format string, args ...any) error {
	if line > 0 {
		return fmt.Errorf("%w: %s:%d: %s", ErrConfig, file, line, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%w: %s: %s", ErrConfig, file, fmt.Sprintf(format, args...))
}

func (c *Config) load(f File, merge bool) error {
	if len(f.Data) > MaxFileSize {
		return fail(f.Name, 0, "%d bytes, over %d", len(f.Data), MaxFileSize)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(f.Data, &doc); err != nil {
		return fail(f.Name, 0, "error loading config file: %s", err.Error())
	}
	if err := checkKeys(f.Name, &doc); err != nil {
		return err
	}
	var root yamlRoot
	if err := doc.Decode(&root); err != nil {
		return fail(f.Name, 0, "error loading config file: %s", err.Error())
	}
	if root.Domain == "" {
		return fail(f.Name, 0, "config file cannot have empty domain")
	}
	d := c.domains[root.Domain]
	if d != nil && !merge {
		return fail(f.Name, 0, "duplicate domain '%s' in config file", root.Domain)
	}
	if d == nil {
		d = &Domain{Name: root.Domain, root: descriptor{children: map[string]*descriptor{}}}
	}
	d.FailureModeDeny = d.FailureModeDeny || root.FailureModeDeny
	if err := d.root.add(f.Name, root.Domain+".", "", root.Descriptors); err != nil {
		return err
	}
	c.domains[root.Domain] = d
	return nil
}

// checkKeys is the reference's validateYamlKeys on a node tree: every
// mapping key is a known string, every list holds mappings, every leaf is
// a scalar.
func checkKeys(file string, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := checkKeys(file, c); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
				return fail(file, k.Line, "config error, key is not of type string: %s", k.Value)
			}
			if !validKeys[k.Value] {
				return fail(file, k.Line, "config error, unknown key '%s'", k.Value)
			}
			switch v.Kind {
			case yaml.SequenceNode:
				for _, e := range v.Content {
					if e.Kind != yaml.MappingNode {
						return fail(file, e.Line, "config error, yaml file contains list of type other than map: %s", e.Value)
					}
					if err := checkKeys(file, e); err != nil {
						return err
					}
				}
			case yaml.MappingNode:
				if err := checkKeys(file, v); err != nil {
					return err
				}
			case yaml.ScalarNode:
				if t := v.ShortTag(); t != "!!str" && t != "!!int" && t != "!!bool" && t != "!!null" {
					return fail(file, v.Line, "error checking config: %s is %s", k.Value, t)
				}
			case yaml.AliasNode:
				return fail(file, v.Line, "error checking config: aliases are not supported")
			}
		}
	case yaml.ScalarNode:
		if n.ShortTag() != "!!null" {
			return fail(file, n.Line, "error loading config file: not a mapping")
		}
	default:
		return fail(file, n.Line, "error loading config file: not a mapping")
	}
	return nil
}

func (d *descriptor) add(file, parent, path string, ds []yamlDescriptor) error {
	for _, y := range ds {
		if y.Key == "" {
			return fail(file, y.line, "descriptor has empty key")
		}
		final := y.Key
		if y.Value != "" {
			final += "_" + y.Value
		}
		full := parent + final
		if _, ok := d.children[final]; ok {
			return fail(file, y.line, "duplicate descriptor composite key '%s'", full)
		}
		p := y.Key
		if path != "" {
			p = path + "." + y.Key
		}
		var lim *Limit
		if rl := y.RateLimit; rl != nil {
			var err error
			if lim, err = limitOf(file, y.line, rl, &y); err != nil {
				return err
			}
			lim.Path = p
		}
		if y.ShareThreshold && !strings.HasSuffix(final, "*") {
			return fail(file, y.line, "share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", final)
		}
		if strings.HasSuffix(final, "*") {
			d.wildcard = append(d.wildcard, final)
		}
		nd := &descriptor{children: map[string]*descriptor{}, limit: lim}
		if err := nd.add(file, full+".", p, y.Descriptors); err != nil {
			return err
		}
		d.children[final] = nd
	}
	return nil
}

func limitOf(file string, line int, rl *yamlRateLimit, y *yamlDescriptor) (*Limit, error) {
	u := unitNames[strings.ToUpper(rl.Unit)]
	if rl.Unlimited {
		if u != Unknown {
			return nil, fail(file, line, "should not specify rate limit unit when unlimited")
		}
	} else if u == Unknown {
		return nil, fail(file, line, "invalid rate limit unit '%s'", rl.Unit)
	}
	lim := &Limit{
		RequestsPerUnit: rl.RequestsPerUnit, Unit: u, Unlimited: rl.Unlimited,
		ShadowMode: y.ShadowMode, QuotaMode: y.QuotaMode, Name: rl.Name,
	}
	for _, r := range rl.Replaces {
		if r.Name == "" {
			return nil, fail(file, line, "should not have an empty replaces entry")
		}
		if r.Name == rl.Name {
			return nil, fail(file, line, "replaces should not contain name of same descriptor")
		}
		lim.Replaces = append(lim.Replaces, r.Name)
	}
	if rl.Unlimited {
		if rl.Algorithm != "" || rl.Burst != 0 {
			return nil, fail(file, line, "should not specify algorithm or burst when unlimited")
		}
		return lim, nil
	}
	alg := ringlimit.FixedWindow
	if rl.Algorithm != "" {
		var err error
		if alg, err = ringlimit.ParseAlgorithm(rl.Algorithm); err != nil {
			return nil, fail(file, line, "invalid algorithm '%s': want token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window", rl.Algorithm)
		}
	}
	if rl.Burst != 0 && alg != ringlimit.TokenBucket && alg != ringlimit.LeakyBucket {
		return nil, fail(file, line, "burst %d: only token_bucket and leaky_bucket have a burst", rl.Burst)
	}
	if rl.RequestsPerUnit == 0 {
		// As envoyproxy/ratelimit: a limit of 0 refuses every request
		// (Rule stays zero; nothing is counted).
		return lim, nil
	}
	lim.Rule = ringlimit.Rule{Algorithm: alg, Limit: int64(rl.RequestsPerUnit), Window: u.Duration(), Burst: rl.Burst}
	if err := lim.Rule.Validate(); err != nil {
		return nil, fail(file, line, "rate_limit: %s", err.Error())
	}
	return lim, nil
}
