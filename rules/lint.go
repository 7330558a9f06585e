package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// Warning is a rule that is valid but probably does not do what its author
// meant: Parse, Load and NewSet accept it and list it in Set.Warnings, and a
// Watcher logs it at level Warn each time it loads a Set that has it.
//
// Today's one warning is an override matched by a header alone: any client
// can send the header, so any client gets the override's limits (or none,
// if it is unlimited). A header is a client's claim; match overrides on
// keys (values of the rule's key, such as an API key your service
// authenticates), or, if a proxy in front sets the header and strips it from
// clients, add keys to it or accept the warning knowingly.
type Warning struct {
	File string // empty for Parse and NewSet
	Line int    // 1-based; 0 for rules built in Go
	Rule string // the rule's name
	Msg  string
}

// String reads like an Error's: "rules: file:line: warning: rule "api": …".
func (w Warning) String() string {
	var b strings.Builder
	b.WriteString("rules: ")
	switch {
	case w.File != "" && w.Line > 0:
		b.WriteString(w.File + ":" + strconv.Itoa(w.Line) + ": ")
	case w.File != "":
		b.WriteString(w.File + ": ")
	case w.Line > 0:
		b.WriteString("line " + strconv.Itoa(w.Line) + ": ")
	}
	fmt.Fprintf(&b, "warning: rule %q: %s", w.Rule, w.Msg)
	return b.String()
}

// Warnings returns what the lint found in the Set's rules, in rule order
// (nil for a nil Set). The slice must not be modified.
func (s *Set) Warnings() []Warning {
	if s == nil {
		return nil
	}
	return s.warnings
}

// lint returns the warnings for a compiled rule r, found in file.
func lint(file string, r *Rule) []Warning {
	var ws []Warning
	for i, o := range r.Overrides {
		if o.Header == "" || len(o.Keys) > 0 {
			continue
		}
		what := "its limits"
		if o.Unlimited {
			what = "unlimited requests"
		}
		ws = append(ws, Warning{File: file, Line: lineOr(o.Line, r.Line), Rule: r.Name, Msg: fmt.Sprintf(
			"override %d matches the header %s: %s alone, which any client can send: every client that sends it gets %s. "+
				"A header is the client's claim; match on keys (values of the rule's key, such as an API key) instead",
			i, o.Header, o.HeaderValue, what)})
	}
	return ws
}
