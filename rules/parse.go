package rules

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit"
	"go.yaml.in/yaml/v3"
)

// Load reads and parses the rule file at path (see Parse).
func Load(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rules: load: %w", err)
	}
	return parse(path, data)
}

// Parse parses a rule file and validates every rule. It reports every problem
// it finds, each an *Error with its line number that wraps ErrInvalid; more
// than one are joined (errors.Join).
//
// The format is a mapping with one key, rules, holding a list of rules (a bare
// list is accepted too):
//
//	rules:
//	  - name: login          # unique; if omitted, "METHOD path" or the path
//	    match:
//	      method: POST       # if omitted, any method
//	      path: /api/login   # a pattern (see Match); if omitted, any path
//	      header: X-Plan     # optional; or {name: X-Plan, value: free}
//	    key: ip              # ip, route, header:NAME, or a list "ip,route"; default ip
//	    algorithm: sliding_window  # default token_bucket
//	    limit: 10            # hits per window, > 0
//	    window: 60s          # a Go duration: 500ms, 60s, 1h
//	    burst: 0             # bucket capacity; 0 means limit
//	    # or several limits, applied all or nothing, instead of limit/window/burst:
//	    # limits: [{limit: 10, window: 1s}, {limit: 1000, window: 24h}]
//	    overrides:           # optional: other limits for some subjects (see Override)
//	      - keys: [key-gold-1, key-gold-2]  # values of the rule's key
//	        limits: [{limit: 100, window: 1s}]
//	      - keys: [key-123]
//	        match: {header: {X-Tier: gold}}  # a header alone is a client's claim: warned
//	        unlimited: true
//	    shadow: false        # true: decide and set headers, never block
//	  - endpoint: /api/posts # shorthand for match: {path: /api/posts}
//	    limit: 5
//	    window: 60s
//
// An empty document is an error; "rules: []" is an empty Set. A valid rule
// that is probably a mistake (an override matched by a header alone, which
// any client can send) is not an error: it is listed in Set.Warnings.
func Parse(data []byte) (*Set, error) { return parse("", data) }

type parser struct {
	file string
	errs []error
}

func (p *parser) fail(line int, err error) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Err: err})
}

func (p *parser) failf(line int, format string, args ...any) {
	p.fail(line, fmt.Errorf(format, args...))
}

func (p *parser) err() error {
	switch len(p.errs) {
	case 0:
		return nil
	case 1:
		return p.errs[0]
	}
	return errors.Join(p.errs...)
}

func parse(file string, data []byte) (*Set, error) {
	p := &parser{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		// The first seed article prints its example with the indentation
		// lost; read that form too, if re-indenting makes it valid.
		fixed := reindentFlattened(data)
		if fixed == nil || yaml.Unmarshal(fixed, &doc) != nil {
			line, msg := yamlLine(err)
			p.fail(line, errors.New(msg))
			return nil, p.err()
		}
	}
	if len(doc.Content) == 0 {
		p.failf(1, "empty document: want a rules list")
		return nil, p.err()
	}
	list := doc.Content[0]
	if list.Kind == yaml.MappingNode {
		var found *yaml.Node
		for i := 0; i+1 < len(list.Content); i += 2 {
			k := list.Content[i]
			if k.Value != "rules" {
				p.failf(k.Line, "unknown key %q (want rules)", k.Value)
				continue
			}
			if found != nil {
				p.failf(k.Line, "rules given twice")
			}
			found = list.Content[i+1]
		}
		if found == nil {
			p.failf(list.Line, "no rules key")
			return nil, p.err()
		}
		list = found
	}
	if list.Kind != yaml.SequenceNode {
		p.failf(list.Line, "rules must be a list")
		return nil, p.err()
	}

	set := &Set{entries: make([]entry, 0, len(list.Content))}
	names := make(map[string]int, len(list.Content)) // name → line
	for _, n := range list.Content {
		e, nameLine, ok := p.rule(n)
		if !ok {
			continue
		}
		if first, dup := names[e.Name]; dup {
			p.failf(nameLine, "duplicate rule name %q (first at line %d)", e.Name, first)
			continue
		}
		names[e.Name] = nameLine
		set.entries = append(set.entries, e)
		set.warnings = append(set.warnings, lint(file, &e.Rule)...)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return set, nil
}

// rule parses one rule node. It returns the compiled rule and the line of its
// name (of the rule, if the name is derived), or ok false after recording
// the errors.
func (p *parser) rule(n *yaml.Node) (e entry, nameLine int, ok bool) {
	if n.Kind != yaml.MappingNode {
		p.failf(n.Line, "a rule must be a mapping")
		return entry{}, 0, false
	}
	before := len(p.errs)
	r := Rule{Line: n.Line}
	lines := map[string]int{} // field → line of its value
	keyText, endpoint := "ip", ""
	var limitsNode, overridesNode *yaml.Node
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if first, dup := seen[k.Value]; dup {
			p.failf(k.Line, "field %q given twice (first at line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		lines[k.Value] = v.Line
		switch k.Value {
		case "name":
			r.Name = p.str(v)
		case "endpoint":
			endpoint = p.str(v)
			lines["match.path"] = v.Line
		case "match":
			p.match(v, &r.Match, lines)
		case "key":
			keyText = p.str(v)
		case "algorithm":
			if s := p.str(v); s != "" {
				a, err := ringlimit.ParseAlgorithm(s)
				if err != nil {
					p.fail(v.Line, err)
				}
				r.Rule.Algorithm = a
			}
		case "limit":
			r.Rule.Limit = p.int(v, "limit")
		case "burst":
			r.Rule.Burst = p.int(v, "burst")
		case "shadow":
			r.Shadow = p.bool(v, "shadow")
		case "window":
			r.Rule.Window = p.duration(v)
		case "limits":
			limitsNode = v
		case "overrides":
			overridesNode = v
		default:
			p.failf(k.Line, "unknown field %q", k.Value)
		}
	}
	if endpoint != "" {
		if r.Match.Path != "" {
			p.failf(lines["endpoint"], "endpoint and match.path both given")
		}
		r.Match.Path = endpoint
	}
	nameLine = lines["name"]
	if r.Name == "" {
		nameLine = n.Line
		switch {
		case r.Match.Path == "":
			p.failf(n.Line, "a rule without a path needs a name")
		case r.Match.Method != "":
			r.Name = strings.ToUpper(r.Match.Method) + " " + r.Match.Path
		default:
			r.Name = r.Match.Path
		}
	}
	if ks, err := ParseKeySpec(keyText); err != nil {
		p.fail(lineOr(lines["key"], n.Line), err)
	} else {
		r.Key = ks
	}
	if limitsNode != nil {
		_, l := lines["limit"]
		_, w := lines["window"]
		_, b := lines["burst"]
		if l || w || b {
			p.failf(limitsNode.Line, "limits and limit/window/burst both given: use one form")
		}
		r.Limits = p.limits(limitsNode, r.Rule.Algorithm)
		if len(r.Limits) > 0 {
			r.Rule = r.Limits[0]
		}
	} else {
		if _, given := lines["limit"]; !given {
			p.failf(n.Line, "limit is required")
		}
		if _, given := lines["window"]; !given {
			p.failf(n.Line, "window is required")
		}
	}
	if overridesNode != nil {
		r.Overrides = p.overrides(overridesNode, r.Rule.Algorithm)
	}
	if len(p.errs) > before {
		return entry{}, 0, false
	}
	e, field, err := compile(r)
	if err != nil {
		p.fail(lineOr(lines[field], n.Line), err)
		return entry{}, 0, false
	}
	return e, nameLine, true
}

// limits parses a list of limits: [{limit: 10, window: 1s}, ...], each with
// an optional algorithm (default alg) and burst.
func (p *parser) limits(n *yaml.Node, alg ringlimit.Algorithm) []ringlimit.Rule {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		p.failf(n.Line, "limits must be a non-empty list")
		return nil
	}
	if len(n.Content) > ringlimit.MaxRules {
		p.failf(n.Line, "%d limits: at most %d", len(n.Content), ringlimit.MaxRules)
		return nil
	}
	out := make([]ringlimit.Rule, 0, len(n.Content))
	for _, ln := range n.Content {
		if ln.Kind != yaml.MappingNode {
			p.failf(ln.Line, "a limit must be a mapping {limit: N, window: D}")
			continue
		}
		lr := ringlimit.Rule{Algorithm: alg}
		var hasLimit, hasWindow bool
		for i := 0; i+1 < len(ln.Content); i += 2 {
			k, v := ln.Content[i], ln.Content[i+1]
			switch k.Value {
			case "limit":
				lr.Limit, hasLimit = p.int(v, "limit"), true
			case "window":
				lr.Window, hasWindow = p.duration(v), true
			case "burst":
				lr.Burst = p.int(v, "burst")
			case "algorithm":
				a, err := ringlimit.ParseAlgorithm(p.str(v))
				if err != nil {
					p.fail(v.Line, err)
				}
				lr.Algorithm = a
			default:
				p.failf(k.Line, "unknown field %q in a limit (want limit, window, burst, algorithm)", k.Value)
			}
		}
		if !hasLimit || !hasWindow {
			p.failf(ln.Line, "a limit needs limit and window")
			continue
		}
		if err := lr.Validate(); err != nil {
			p.fail(ln.Line, err)
			continue
		}
		out = append(out, lr)
	}
	return out
}

// overrides parses a rule's overrides list:
//
//	overrides:
//	  - match: {header: {X-Tier: gold}}
//	    limits: [{limit: 100, window: 1s}]
//	  - keys: [key-123]
//	    unlimited: true
func (p *parser) overrides(n *yaml.Node, alg ringlimit.Algorithm) []Override {
	if n.Kind != yaml.SequenceNode {
		p.failf(n.Line, "overrides must be a list")
		return nil
	}
	out := make([]Override, 0, len(n.Content))
	for _, on := range n.Content {
		if on.Kind != yaml.MappingNode {
			p.failf(on.Line, "an override must be a mapping")
			continue
		}
		o := Override{Line: on.Line}
		for i := 0; i+1 < len(on.Content); i += 2 {
			k, v := on.Content[i], on.Content[i+1]
			switch k.Value {
			case "match":
				p.overrideMatch(v, &o)
			case "keys":
				if v.Kind != yaml.SequenceNode {
					p.failf(v.Line, "keys must be a list")
					continue
				}
				for _, kn := range v.Content {
					o.Keys = append(o.Keys, p.str(kn))
				}
			case "limits":
				o.Limits = p.limits(v, alg)
			case "unlimited":
				b, err := strconv.ParseBool(p.str(v))
				if err != nil {
					p.failf(v.Line, "unlimited %q is not true or false", v.Value)
				}
				o.Unlimited = b
			default:
				p.failf(k.Line, "unknown field %q in an override (want match, keys, limits, unlimited)", k.Value)
			}
		}
		out = append(out, o)
	}
	return out
}

// overrideMatch parses an override's match: {header: {NAME: VALUE}}.
func (p *parser) overrideMatch(n *yaml.Node, o *Override) {
	if n.Kind != yaml.MappingNode {
		p.failf(n.Line, "match must be a mapping")
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value != "header" {
			p.failf(k.Line, "unknown field %q in an override's match (want header)", k.Value)
			continue
		}
		if v.Kind != yaml.MappingNode || len(v.Content) != 2 {
			p.failf(v.Line, "an override's match.header is one {NAME: VALUE}")
			continue
		}
		o.Header, o.HeaderValue = p.str(v.Content[0]), p.str(v.Content[1])
	}
}

func (p *parser) duration(n *yaml.Node) time.Duration {
	s := p.str(n)
	d, err := time.ParseDuration(s)
	if err != nil {
		p.failf(n.Line, "window %q is not a duration (like 500ms, 60s, 1h)", s)
	}
	return d
}

func (p *parser) match(n *yaml.Node, m *Match, lines map[string]int) {
	if n.Kind != yaml.MappingNode {
		p.failf(n.Line, "match must be a mapping")
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		lines["match."+k.Value] = v.Line
		switch k.Value {
		case "method":
			m.Method = p.str(v)
		case "path":
			m.Path = p.str(v)
		case "header":
			if v.Kind == yaml.MappingNode {
				for j := 0; j+1 < len(v.Content); j += 2 {
					hk, hv := v.Content[j], v.Content[j+1]
					switch hk.Value {
					case "name":
						m.Header = p.str(hv)
					case "value":
						m.HeaderValue = p.str(hv)
					default:
						p.failf(hk.Line, "unknown field %q in match.header (want name, value)", hk.Value)
					}
				}
			} else {
				m.Header = p.str(v)
			}
		default:
			p.failf(k.Line, "unknown field %q in match (want method, path, header)", k.Value)
		}
	}
}

func (p *parser) str(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		p.failf(n.Line, "want a single value")
		return ""
	}
	return n.Value
}

func (p *parser) int(n *yaml.Node, field string) int64 {
	s := p.str(n)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil && n.Kind == yaml.ScalarNode {
		p.failf(n.Line, "%s %q is not an integer", field, s)
	}
	return v
}

func (p *parser) bool(n *yaml.Node, field string) bool {
	s := p.str(n)
	switch strings.ToLower(s) { // YAML 1.2's true, True, TRUE
	case "true":
		return true
	case "false":
		return false
	}
	if n.Kind == yaml.ScalarNode {
		p.failf(n.Line, "%s %q is not true or false", field, s)
	}
	return false
}

func lineOr(line, def int) int {
	if line > 0 {
		return line
	}
	return def
}

// yamlLine splits a yaml.v3 syntax error ("yaml: line 4: did not find
// expected key") into its line and message; line 0 and the whole text if it
// has no line.
func yamlLine(err error) (line int, msg string) {
	msg = err.Error()
	rest, ok := strings.CutPrefix(msg, "yaml: line ")
	if !ok {
		return 0, msg
	}
	digits, text, ok := strings.Cut(rest, ": ")
	n, err2 := strconv.Atoi(digits)
	if !ok || err2 != nil {
		return 0, msg
	}
	return n, "yaml: " + text
}

// reindentFlattened repairs a rules list whose indentation was lost, as the
// first seed article prints it:
//
//	rules:
//	- endpoint: /api/posts
//	limit: 5
//
// A "key: value" line at column 0 that follows a "- " item at column 0
// belongs to that item, so it is indented by two spaces. Line numbers do not
// change. It returns nil when there is nothing to repair.
func reindentFlattened(data []byte) []byte {
	lines := strings.Split(string(data), "\n")
	inItem, changed := false, false
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "- "):
			inItem = true
		case strings.HasPrefix(l, "rules:"):
			inItem = false
		case inItem && flatKey.MatchString(l):
			lines[i] = "  " + l
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return []byte(strings.Join(lines, "\n"))
}

var flatKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*:`)
