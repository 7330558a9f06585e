package rules

import (
	"net/http"
	"net/textproto"

	"github.com/ringlimit/ringlimit"
)

// Override replaces a rule's limits for some of its subjects: the requests
// whose key value is one of Keys (an API key, a tenant), or that carry a
// header value (a tier, a plan). A header is the client's claim: an override
// matched by a header alone applies to any client that sends it, so the lint
// warns about it (see Warning); match on Keys of an authenticated key, or
// give a header override Keys too. A rule's overrides are tried on every
// request it matches; the one that applies is chosen by precedence:
//
//  1. Unlimited wins: if any matching override is Unlimited, the rule does
//     not limit the request at all (no state, no headers).
//  2. Otherwise the most specific matching override applies: one that names
//     Keys and a header beats one that names Keys, which beats one that
//     names a header only.
//  3. Among equally specific ones, the first in the file.
//
// An override's state is its own: its key is the rule's key with the
// override's index in it, so a tenant under an override never shares a count
// with the default limits of the same key value (and a tenant that moves to
// another tier starts afresh there).
type Override struct {
	Header      string   // if not empty, the request must carry this header with HeaderValue
	HeaderValue string   // the header's value, exactly
	Keys        []string // if not empty, the rule's key value (its key spec's parts joined by "|") must be one of these
	Limits      []ringlimit.Rule
	Unlimited   bool
	// Line is where the override starts in its file; zero when built in Go.
	Line int

	keys map[string]bool
}

// specificity orders matching overrides: higher applies.
func (o *Override) specificity() int {
	s := 0
	if len(o.Keys) > 0 {
		s += 2
	}
	if o.Header != "" {
		s++
	}
	return s
}

func (o *Override) matches(r *http.Request, key string) bool {
	if len(o.Keys) > 0 && !o.keys[key] {
		return false
	}
	if o.Header != "" {
		for _, v := range r.Header[textproto.CanonicalMIMEHeaderKey(o.Header)] {
			if v == o.HeaderValue {
				return true
			}
		}
		return false
	}
	return true
}

// OverrideFor returns the index in r.Overrides of the override that applies
// to a request with key value key (the part of the state key after the
// rule's name), or -1 when the rule's own Limits apply.
func (r *Rule) OverrideFor(req *http.Request, key string) int {
	best := -1
	for i := range r.Overrides {
		o := &r.Overrides[i]
		if !o.matches(req, key) {
			continue
		}
		if o.Unlimited {
			return i
		}
		if best < 0 || o.specificity() > r.Overrides[best].specificity() {
			best = i
		}
	}
	return best
}

// compileOverride validates o; field names the offending field.
func compileOverride(o *Override) (field string, err error) {
	if o.Header == "" && len(o.Keys) == 0 {
		return "match", invalidf("an override needs match.header or keys")
	}
	if o.Header != "" && (!validHeaderName(o.Header) || o.HeaderValue == "") {
		return "match", invalidf("override header %q: want a valid name and a value", o.Header)
	}
	o.keys = make(map[string]bool, len(o.Keys))
	for _, k := range o.Keys {
		if k == "" {
			return "keys", invalidf("an override key is empty")
		}
		o.keys[k] = true
	}
	switch {
	case o.Unlimited && len(o.Limits) > 0:
		return "limits", invalidf("an unlimited override has no limits")
	case !o.Unlimited && len(o.Limits) == 0:
		return "limits", invalidf("an override needs limits or unlimited: true")
	}
	if !o.Unlimited {
		if err := ringlimit.ValidateRules(o.Limits); err != nil {
			return "limits", invalid(err)
		}
	}
	return "", nil
}
