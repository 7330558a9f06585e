package remote

import "github.com/ringlimit/ringlimit"

// ParseReserve decodes a reservation script's reply (see parseReserve) and
// returns its fields and the Decision it gives, for the fuzz target.
func ParseReserve(v string, rule ringlimit.Rule, n int64) (status, wait, level, t int64, d ringlimit.Decision, err error) {
	r, err := parseReserve(v, rule, n)
	if err != nil {
		return 0, 0, 0, 0, d, err
	}
	return r.status, r.wait, r.level, r.t, r.decision(rule), nil
}

// ErrBadReply is errBadReply, for the fuzz target.
var ErrBadReply = errBadReply
