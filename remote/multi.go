package remote

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
)

var _ ringlimit.MultiLimiter = (*Limiter)(nil)

// MultiScript returns the full Lua source of AllowAll's script: the value
// checks and the prelude, then the code that applies every rule all or
// nothing (scripts/multi.lua), which runs each rule through its
// algorithm's body: the very files the single-rule scripts run, placed in
// its loop over the rules as one branch each, so each algorithm has one
// copy in Lua. A body's last statement, its reply (return reply(...)),
// becomes verdict = reply(...); its other returns (return BAD) end the
// whole script, which has written nothing yet. Inline, the bodies cost no
// function call, closure or upvalue per call.
func MultiScript() string {
	var b strings.Builder
	for alg, f := range scriptFiles {
		body := strings.TrimRight(source(f), "\n")
		last := strings.LastIndex(body, "\n"+lastReturn)
		if last < 0 || strings.Contains(body[last+1:], "\n") || strings.Contains(body, "verdict") {
			// Embedded: every test of the package fails at once.
			panic("remote: " + f + " does not end in one line " + lastReturn + "...), or names verdict")
		}
		if alg > 0 {
			b.WriteString("else")
		}
		fmt.Fprintf(&b, "if alg == %d then\n%s\nverdict = reply(%s\n", alg, body[:last], body[last+1+len(lastReturn):])
	}
	b.WriteString("end")
	multi := source("multi.lua")
	if !strings.Contains(multi, bodiesMark) {
		panic("remote: multi.lua has no " + bodiesMark) // embedded, as above
	}
	return source("value.lua", "prelude.lua") +
		fmt.Sprintf("\nlocal LOG = %d\n", ringlimit.SlidingLog) +
		strings.Replace(multi, bodiesMark, b.String(), 1)
}

// lastReturn starts the last statement of every algorithm's body, and
// bodiesMark is the line of multi.lua that MultiScript replaces with them.
const (
	lastReturn = "return reply("
	bodiesMark = "--{{bodies}}"
)

// multiScripts is AllowAll's script, built once.
var multiScripts = buildMulti(MultiScript())

type multiSet struct{ exec, peek *valkey.Lua }

func buildMulti(src string) *multiSet {
	// Not retryable, as the single-rule scripts; the peek is read-only.
	return &multiSet{exec: valkey.NewLuaScript(src), peek: valkey.NewLuaScriptReadOnly(src)}
}

// IndexKey returns the Valkey key that holds key's state at index i of
// AllowAll's rules: Key(key) for index 0 (the state AllowN uses), else
// Key(key) + "#" + i. No key's Key ends that way (Key ends in "}"), and the
// hash tag is the key's, so all of a key's states share a Valkey Cluster
// slot and one script may touch them.
func (l *Limiter) IndexKey(key string, i int) string {
	if i == 0 {
		return l.Key(key)
	}
	return l.Key(key) + "#" + strconv.Itoa(i)
}

// AllowAll applies every rule to key at once, all or nothing (see
// ringlimit.MultiLimiter), in one script run: rules[i] decides on the state
// at IndexKey(key, i), and the script writes every state or none. One rule
// runs AllowN's script (its state is index 0). A rule
// that admits while another denies reports what it has left now. Bad input
// returns an error wrapping a ringlimit sentinel and sends nothing.
func (l *Limiter) AllowAll(ctx context.Context, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	if err := validateAll(key, rules, n); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("remote: eval multi: %w", err)
	}
	if len(rules) == 1 {
		// The single-rule script decides index 0 (Key(key)) exactly so, at
		// its cost.
		d, err := l.decide(ctx, key, rules[0], n)
		if err != nil {
			return nil, err
		}
		return []ringlimit.Decision{d}, nil
	}
	now := ""
	if l.clock != nil {
		now = strconv.FormatInt(l.clock.Now().UnixMilli(), 10)
	}
	keys := make([]string, len(rules))
	packed := make([]byte, 0, ruleLen*len(rules))
	for i, r := range rules {
		keys[i] = l.IndexKey(key, i)
		packed = appendRule(packed, r)
	}
	args := []string{string(packed), now, strconv.FormatInt(n, 10)}
	script := l.multi.exec
	if n == 0 {
		script = l.multi.peek
	}
	resp := script.Exec(ctx, l.client, keys, args)
	if err := resp.Error(); err != nil {
		return nil, fmt.Errorf("remote: eval multi: %w", callerErr(ctx, err))
	}
	v, err := resp.ToString()
	if err == nil && v == badValue {
		return nil, fmt.Errorf("remote: eval multi: key %s: %w", strconv.Quote(key), ErrBadValue)
	}
	if err != nil || len(v) != replyLen*len(rules) {
		return nil, fmt.Errorf("remote: eval multi: unexpected reply %s: %w", resp.String(), err)
	}
	ds := make([]ringlimit.Decision, len(rules))
	for i, r := range rules {
		w := v[replyLen*i:]
		ds[i] = ringlimit.Decision{
			Allowed:    word(w, 0) == 1,
			Limit:      r.Limit,
			Remaining:  word(w, 1),
			RetryAfter: time.Duration(word(w, 2)) * time.Millisecond,
			ResetAfter: time.Duration(word(w, 3)) * time.Millisecond,
			Delay:      time.Duration(word(w, 4)) * time.Millisecond,
			Source:     ringlimit.Store,
		}
	}
	return ds, nil
}

// validateAll checks AllowAll's input: 1 to ringlimit.MaxRules rules, each
// valid for n hits on key.
func validateAll(key string, rules []ringlimit.Rule, n int64) error {
	if len(rules) == 0 || len(rules) > ringlimit.MaxRules {
		return fmt.Errorf("remote: %w: %d rules, want 1 to %d", ringlimit.ErrInvalidRule, len(rules), ringlimit.MaxRules)
	}
	for i, r := range rules {
		if err := ringlimit.ValidateCall(key, r, n); err != nil {
			return fmt.Errorf("rules[%d]: %w", i, err)
		}
	}
	return nil
}

// AllowAll is the Limiter's AllowAll, or ErrNotConnected (after validating
// the input, so bad input is still reported as bad input).
func (k *Connector) AllowAll(ctx context.Context, key string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	l, err := k.limiter()
	if err != nil {
		if verr := validateAll(key, rules, n); verr != nil {
			return nil, verr
		}
		return nil, fmt.Errorf("remote: eval multi: %w", err)
	}
	return l.AllowAll(ctx, key, rules, n)
}

var _ ringlimit.MultiLimiter = (*Connector)(nil)
