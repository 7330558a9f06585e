package httplimit

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// RuleStats are one rule's counters in a Middleware, since it was made.
type RuleStats struct {
	Name string
	// The rule's decisions on the requests it applied to (a request that an
	// earlier rule denied does not reach it). Allowed: it admitted the
	// request. Denied: it denied it and the request was refused.
	// ShadowDenied: it denied it but the request was passed on, because the
	// rule is a shadow rule (rules.Rule.Shadow) or the Middleware is
	// WithShadow.
	Allowed, Denied, ShadowDenied uint64
	// NearLimit counts the allowed decisions that left less than 20 % of
	// the limit remaining.
	NearLimit uint64
}

// ruleCounters are one rule's counters.
type ruleCounters struct {
	allowed, denied, shadowDenied, nearLimit atomic.Uint64
}

// MaxRuleStats bounds the rule names a Middleware keeps counters for: the
// names of the rules it has applied, which the operator's rule files bound
// (rule names, never keys). Rules applied after that many names count under
// the name OtherRules, so reloads that keep renaming rules cannot grow it
// without end.
const MaxRuleStats = 1024

// OtherRules is the name the rules beyond MaxRuleStats count under.
const OtherRules = "(other)"

// ruleTable maps rule names to their counters. Lookups read an immutable
// map through an atomic pointer; a new name copies it under the mutex.
type ruleTable struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]*ruleCounters]
}

func (t *ruleTable) get(name string) *ruleCounters {
	if p := t.m.Load(); p != nil {
		if c := (*p)[name]; c != nil {
			return c
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var old map[string]*ruleCounters
	if p := t.m.Load(); p != nil {
		old = *p
	}
	if c := old[name]; c != nil {
		return c
	}
	if len(old) >= MaxRuleStats {
		if c := old[OtherRules]; c != nil {
			return c
		}
		name = OtherRules // one past the bound
	}
	next := make(map[string]*ruleCounters, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	c := new(ruleCounters)
	next[name] = c
	t.m.Store(&next)
	return c
}

// count records each rule's decision on one request.
func (m *Middleware) count(res []applied) {
	for i := range res {
		if res[i].of == 0 {
			continue // a rule's second or later limit: counted with its first
		}
		a := &res[i]
		if a.of > 1 { // several limits: the rule counts by its binding one
			a = &res[i+mostRestrictive(res[i:i+a.of])]
		}
		c := m.rules.get(res[i].name)
		switch {
		case a.d.Allowed:
			c.allowed.Add(1)
			if a.d.Remaining*5 < a.d.Limit {
				c.nearLimit.Add(1)
			}
		case a.shadow || m.shadow:
			c.shadowDenied.Add(1)
		default:
			c.denied.Add(1)
		}
	}
}

// RuleStats returns the counters of every rule the Middleware has applied,
// and of the rules in force that it has not applied yet (all zero), sorted by
// name.
func (m *Middleware) RuleStats() []RuleStats {
	var out []RuleStats
	if p := m.rules.m.Load(); p != nil {
		for name, c := range *p {
			out = append(out, RuleStats{Name: name, Allowed: c.allowed.Load(), Denied: c.denied.Load(),
				ShadowDenied: c.shadowDenied.Load(), NearLimit: c.nearLimit.Load()})
		}
	}
	has := func(name string) bool {
		return slices.ContainsFunc(out, func(s RuleStats) bool { return s.Name == name })
	}
	if m.fixed {
		if len(out) < MaxRuleStats && !has(m.name) {
			out = append(out, RuleStats{Name: m.name})
		}
	} else if m.src != nil {
		set := m.src.Current()
		for i := range set.Len() {
			if name := set.Rule(i).Name; len(out) < MaxRuleStats && !has(name) {
				out = append(out, RuleStats{Name: name})
			}
		}
	}
	slices.SortFunc(out, func(a, b RuleStats) int { return strings.Compare(a.Name, b.Name) })
	return out
}
