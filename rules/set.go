package rules

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ringlimit/ringlimit"
)

// Rule is one named rule of a Set: which requests it matches, what it counts
// hits by, and the limit.
type Rule struct {
	// Name identifies the rule: unique in its Set, printable ASCII without
	// '"', '\' or ':'. Keys are prefixed with it, and the RateLimit headers
	// report it.
	Name  string
	Match Match
	Key   KeySpec
	// Rule is the first of Limits: the one limit of a rule that has one.
	Rule ringlimit.Rule
	// Limits are every limit the rule applies to a request, all or nothing
	// (ringlimit.MultiLimiter): at most ringlimit.MaxRules. Limits[0] is
	// Rule. NewSet fills in Limits from Rule when it is empty.
	Limits []ringlimit.Rule
	// Overrides replace Limits for some subjects (see Override).
	Overrides []Override
	// Shadow rules are decided and reported in the headers, but never
	// block a request: for rolling a new limit out on live traffic.
	Shadow bool
	// Line is where the rule starts in its file; zero for rules built in Go.
	Line int
}

// Set is an immutable, ordered list of rules. It is safe for simultaneous
// use; its methods never modify it. The Rules it returns point into the Set
// and must not be modified.
type Set struct {
	entries  []entry
	warnings []Warning
}

type entry struct {
	Rule
	pat pattern
}

// NewSet validates rules and returns them as a Set, in the given order. Its
// errors wrap ErrInvalid (and ringlimit.ErrInvalidRule for a bad limit).
// What is valid but suspect is listed in the Set's Warnings.
func NewSet(rules ...Rule) (*Set, error) {
	s := &Set{entries: make([]entry, 0, len(rules))}
	seen := make(map[string]bool, len(rules))
	for _, r := range rules {
		e, _, err := compile(r)
		if err != nil {
			return nil, fmt.Errorf("rules: rule %q: %w", r.Name, err)
		}
		if seen[e.Name] {
			return nil, invalidf("rules: rule %q: duplicate name", r.Name)
		}
		seen[e.Name] = true
		s.entries = append(s.entries, e)
		s.warnings = append(s.warnings, lint("", &e.Rule)...)
	}
	return s, nil
}

// compile validates r and compiles its path pattern. On error, field names
// the offending field ("name", "match.path", "key", "limit", "window",
// "burst", or "" for the rule as a whole).
func compile(r Rule) (e entry, field string, err error) {
	if err := checkName(r.Name); err != nil {
		return entry{}, "name", err
	}
	r.Match.normalize()
	pat, err := compilePattern(r.Match.Path)
	if err != nil {
		return entry{}, "match.path", err
	}
	if r.Match.Header != "" && !validHeaderName(r.Match.Header) {
		return entry{}, "match.header", invalidf("%q is not a valid header name", r.Match.Header)
	}
	if r.Match.HeaderValue != "" && r.Match.Header == "" {
		return entry{}, "match.header", invalidf("a header value without a header name")
	}
	if r.Key.Len() == 0 {
		return entry{}, "key", invalid(errEmptyKey)
	}
	switch {
	case len(r.Limits) == 0:
		r.Limits = []ringlimit.Rule{r.Rule}
	case r.Rule == ringlimit.Rule{}:
		r.Rule = r.Limits[0]
	case r.Rule != r.Limits[0]:
		return entry{}, "limits", invalidf("Rule and Limits[0] differ")
	}
	if len(r.Limits) > 1 {
		if err := ringlimit.ValidateRules(r.Limits); err != nil {
			return entry{}, "limits", invalid(err)
		}
	}
	r.Overrides = append([]Override(nil), r.Overrides...)
	for i := range r.Overrides {
		if field, err := compileOverride(&r.Overrides[i]); err != nil {
			return entry{}, "overrides", fmt.Errorf("override %d: %s: %w", i, field, err)
		}
	}
	if err := r.Rule.Validate(); err != nil {
		switch {
		case r.Rule.Limit <= 0:
			field = "limit"
		case r.Rule.Window <= 0 || r.Rule.Window%time.Millisecond != 0:
			field = "window"
		case r.Rule.Burst < 0:
			field = "burst"
		}
		return entry{}, field, invalid(err)
	}
	return entry{Rule: r, pat: pat}, "", nil
}

func checkName(name string) error {
	if name == "" {
		return invalidf("name is empty")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == ':' {
			return invalidf("name %q: only printable ASCII without '\"', '\\' or ':'", name)
		}
	}
	return nil
}

// Current returns s. It lets a *Set stand wherever a source of the current
// rules is expected (the Watcher is the other).
func (s *Set) Current() *Set { return s }

// Len is the number of rules.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.entries)
}

// Rule returns the i'th rule, 0 ≤ i < Len().
func (s *Set) Rule(i int) *Rule { return &s.entries[i].Rule }

// Lookup returns the rule named name, or nil.
func (s *Set) Lookup(name string) *Rule {
	for i := range s.Len() {
		if s.entries[i].Name == name {
			return &s.entries[i].Rule
		}
	}
	return nil
}

// Match returns the rules that match r, in Set order. Shorthand for
// AppendMatch(nil, r).
func (s *Set) Match(r *http.Request) []*Rule { return s.AppendMatch(nil, r) }

// AppendMatch appends the rules that match r to dst, in Set order, and
// returns the extended slice. It allocates nothing when dst has room. A nil
// Set matches nothing.
func (s *Set) AppendMatch(dst []*Rule, r *http.Request) []*Rule {
	for i := range s.Len() {
		e := &s.entries[i]
		if e.Match.matchRequest(&e.pat, r) {
			dst = append(dst, &e.Rule)
		}
	}
	return dst
}
