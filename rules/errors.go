package rules

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every error about a rule file's or a rule's
// content.
var ErrInvalid = errors.New("rules: invalid")

// Error is one problem in a rule file, at a line. It wraps ErrInvalid and the
// cause (which may itself wrap ringlimit.ErrInvalidRule).
type Error struct {
	File string // empty for Parse
	Line int    // 1-based; 0 if unknown
	Err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("rules: ")
	switch {
	case e.File != "" && e.Line > 0: // file:line, as compilers write it
		b.WriteString(e.File)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	case e.File != "":
		b.WriteString(e.File)
		b.WriteString(": ")
	case e.Line > 0:
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns ErrInvalid and the cause, so errors.Is finds both.
func (e *Error) Unwrap() []error { return []error{ErrInvalid, e.Err} }

// invalidError is a content error outside a file: it wraps ErrInvalid and,
// when there is one, a cause.
type invalidError struct {
	msg   string
	cause error
}

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.cause}
}

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

func invalid(cause error) error { return &invalidError{msg: cause.Error(), cause: cause} }
