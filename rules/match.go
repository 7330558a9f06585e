package rules

import (
	"net/http"
	"net/textproto"
	"strings"
)

// Match says which requests a rule applies to. Every condition set must hold;
// the zero Match matches every request.
//
// Path is a pattern in the style of http.ServeMux, without method or host:
//
//   - "" matches every path;
//   - "/api/posts" matches that path only;
//   - a pattern ending in "/" ("/api/") matches every path below it, not the
//     path without the slash ("/api");
//   - a segment "{name}" matches any one non-empty segment
//     ("/users/{id}/posts"), and a last segment "{name...}" matches the rest of
//     the path, like a trailing "/".
//
// Paths are compared with the request's URL.Path, segment by segment.
type Match struct {
	Method      string // if empty, any method; otherwise the request method, exactly (NewSet upper-cases it)
	Path        string // a path pattern (see above); if empty, any path
	Header      string // if not empty, the request must carry this header
	HeaderValue string // if not empty, one of Header's values must equal it exactly
}

// pattern is a compiled Match.Path.
type pattern struct {
	any    bool // the empty pattern
	prefix bool // ends in "/" or "{name...}": matches deeper paths
	segs   []segment
}

type segment struct {
	lit  string
	wild bool // "{name}"
}

func compilePattern(p string) (pattern, error) {
	if p == "" {
		return pattern{any: true}, nil
	}
	if p[0] != '/' {
		return pattern{}, invalidf("path %q does not start with /", p)
	}
	var pat pattern
	rest := p[1:]
	if strings.HasSuffix(rest, "/") || rest == "" {
		pat.prefix = true
		rest = strings.TrimSuffix(rest, "/")
	}
	if rest == "" {
		return pat, nil
	}
	segs := strings.Split(rest, "/")
	for i, s := range segs {
		switch {
		case s == "":
			return pattern{}, invalidf("path %q has an empty segment", p)
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "...}"):
			if i != len(segs)-1 || pat.prefix {
				return pattern{}, invalidf("path %q: %s must be the last segment", p, s)
			}
			if len(s) == len("{...}") {
				return pattern{}, invalidf("path %q: wildcard %s has no name", p, s)
			}
			pat.prefix = true
			continue
		case strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}"):
			if len(s) == 2 || strings.ContainsAny(s[1:len(s)-1], "{}") {
				return pattern{}, invalidf("path %q: bad wildcard %s", p, s)
			}
			pat.segs = append(pat.segs, segment{wild: true})
			continue
		case strings.ContainsAny(s, "{}"):
			return pattern{}, invalidf("path %q: a wildcard must be a whole segment", p)
		}
		pat.segs = append(pat.segs, segment{lit: s})
	}
	return pat, nil
}

// match reports whether path matches, without allocating.
func (p *pattern) match(path string) bool {
	if p.any {
		return true
	}
	if path == "" || path[0] != '/' {
		return false
	}
	path = path[1:]
	for i, s := range p.segs {
		seg, after, more := strings.Cut(path, "/")
		if s.wild {
			if seg == "" {
				return false
			}
		} else if seg != s.lit {
			return false
		}
		if !more { // that was the path's last segment
			return i == len(p.segs)-1 && !p.prefix
		}
		path = after
	}
	return p.prefix
}

// matchRequest reports whether r meets every condition of m; pat is m.Path
// compiled.
func (m *Match) matchRequest(pat *pattern, r *http.Request) bool {
	if m.Method != "" && r.Method != m.Method {
		return false
	}
	if !pat.match(r.URL.Path) {
		return false
	}
	if m.Header == "" {
		return true
	}
	vs := r.Header[m.Header]
	if m.HeaderValue == "" {
		return len(vs) > 0
	}
	for _, v := range vs {
		if v == m.HeaderValue {
			return true
		}
	}
	return false
}

// normalize canonicalises the method and header name.
func (m *Match) normalize() {
	m.Method = strings.ToUpper(m.Method)
	if m.Header != "" {
		m.Header = textproto.CanonicalMIMEHeaderKey(m.Header)
	}
}
