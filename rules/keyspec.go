package rules

import (
	"errors"
	"net/textproto"
	"strings"
)

// KeyKind names one part of a KeySpec.
type KeyKind uint8

const (
	KeyIP     KeyKind = iota + 1 // the client IP address (grouped by prefix for IPv6)
	KeyHeader                    // the (first) value of a request header; a request without it has no key
	KeyRoute                     // the route pattern that matched the request
)

// KeyPart is one part of a KeySpec.
type KeyPart struct {
	Kind   KeyKind
	Header string // KeyHeader only: the header's canonical name
}

// KeySpec says what a rule counts hits by: the client IP, a header, the route,
// or a combination of these, written "ip", "header:X-API-Key", "route" or
// "ip,route". The zero KeySpec has no parts; NewSet refuses it.
//
// A KeySpec is immutable and safe for simultaneous use.
type KeySpec struct {
	parts []KeyPart
	text  string
}

// ParseKeySpec parses a key spec: parts "ip", "route" or "header:NAME",
// separated by commas, each at most once. Its errors wrap ErrInvalid.
func ParseKeySpec(s string) (KeySpec, error) {
	var k KeySpec
	var text []string
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		var p KeyPart
		switch {
		case part == "ip":
			p.Kind = KeyIP
		case part == "route":
			p.Kind = KeyRoute
		case strings.HasPrefix(part, "header:"):
			name := strings.TrimSpace(part[len("header:"):])
			if !validHeaderName(name) {
				return KeySpec{}, invalidf("key %q: %q is not a valid header name", s, name)
			}
			p = KeyPart{Kind: KeyHeader, Header: textproto.CanonicalMIMEHeaderKey(name)}
			part = "header:" + p.Header
		default:
			return KeySpec{}, invalidf("key %q: unknown part %q (want ip, route or header:NAME)", s, part)
		}
		for _, q := range k.parts {
			if q == p {
				return KeySpec{}, invalidf("key %q: %q appears twice", s, part)
			}
		}
		k.parts = append(k.parts, p)
		text = append(text, part)
	}
	k.text = strings.Join(text, ",")
	return k, nil
}

// Len is the number of parts.
func (k KeySpec) Len() int { return len(k.parts) }

// Part returns the i'th part, 0 ≤ i < Len().
func (k KeySpec) Part(i int) KeyPart { return k.parts[i] }

// String returns the spec as ParseKeySpec accepts it, header names
// canonicalised.
func (k KeySpec) String() string { return k.text }

var errEmptyKey = errors.New("key is empty")

// validHeaderName reports whether s is a non-empty RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
