package remote

import (
	"context"
	"embed"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
)

// Config configures a Limiter. The zero Config is valid.
type Config struct {
	// Prefix is put before every key: the Valkey key of key is
	// Prefix + "{" + key + "}", so on Valkey Cluster the key alone picks the
	// slot (a Prefix must not contain "{"). If empty, "rl:".
	Prefix string
	// Clock tells the time. If nil, each script reads the server's TIME, so
	// every client of one server shares one clock. Set it in tests, or to
	// compare decisions with a local.Limiter on the same clock.
	Clock ringlimit.Clock
}

// DefaultPrefix is the Prefix used when Config.Prefix is empty.
const DefaultPrefix = "rl:"

//go:embed scripts/*.lua
var scriptFS embed.FS

// scriptFiles are the algorithms' scripts, by ringlimit.Algorithm.
var scriptFiles = [...]string{
	ringlimit.TokenBucket:   "token_bucket.lua",
	ringlimit.LeakyBucket:   "leaky_bucket.lua",
	ringlimit.FixedWindow:   "fixed_window.lua",
	ringlimit.SlidingLog:    "sliding_log.lua",
	ringlimit.SlidingWindow: "sliding_window.lua",
}

// Script returns the full Lua source that decides alg: the shared heads
// (value.lua, prelude.lua, read.lua) followed by the algorithm's body; "" for an
// unknown algorithm.
func Script(alg ringlimit.Algorithm) string {
	if int(alg) >= len(scriptFiles) {
		return ""
	}
	return source("value.lua", "prelude.lua", "read.lua", scriptFiles[alg])
}

// scriptSet is the compiled scripts, by algorithm.
type scriptSet [len(scriptFiles)]struct{ exec, peek *valkey.Lua }

// source concatenates embedded script files.
func source(files ...string) string {
	var src []byte
	for _, f := range files {
		b, err := scriptFS.ReadFile("scripts/" + f)
		if err != nil {
			panic(err) // embedded: cannot happen
		}
		src = append(src, b...)
	}
	return string(src)
}

// resetScript deletes a state, and leaves a key alone unless it holds a
// value of ours.
var resetScript = valkey.NewLuaScript(source("value.lua", "reset.lua"))

// ErrBadValue: the key's Valkey name holds something the scripts did not
// write: another type (a hash, list, set, zset, ...), another application's
// string, or corrupt bytes. It is a problem of that key, not of the store:
// the Limiter answers that key with an error wrapping ErrBadValue (and
// failover answers it by its policy without counting a store failure), and
// never writes over the value.
// It wraps ringlimit.ErrBadValue, which package failover recognises.
var ErrBadValue = fmt.Errorf("remote: bad value under the key: %w", ringlimit.ErrBadValue)

// badValue is the scripts' reply for such a key (value.lua: BAD).
const badValue = "bad value"

// scripts are built once: their SHA-1s are computed at init, so New is
// cheap and every Limiter shares them.
var scripts = buildScripts(Script)

func buildScripts(source func(ringlimit.Algorithm) string) *scriptSet {
	s := new(scriptSet)
	for alg := range scriptFiles {
		src := source(ringlimit.Algorithm(alg))
		// Not retryable: a retry after the script ran would charge twice.
		s[alg].exec = valkey.NewLuaScript(src)
		// The same script (same SHA-1) as EVALSHA_RO for peeks: it writes
		// nothing, so valkey-go may retry it, and a replica may serve it.
		s[alg].peek = valkey.NewLuaScriptReadOnly(src)
	}
	return s
}

// Limiter decides in Valkey: one Lua script per algorithm, one round trip
// per decision, atomic on the server.
//
// Limiter is safe for simultaneous use by multiple goroutines. It does not
// own the client: closing the client is the caller's job.
type Limiter struct {
	shards atomic.Pointer[shardMap] // a cluster's slot map (shard.go); nil until read

	client valkey.Client
	prefix string
	clock  ringlimit.Clock
	lua    *scriptSet    // the shared scripts
	multi  *multiSet     // AllowAll's script
	wait   *waitSet      // WaitN's scripts (wait.go)
	give   *valkey.Lua   // GiveBack's script (giveback.go)
	stale  atomic.Uint64 // WriteStates' writes dropped as stale
	// staleCancels counts the waiters' cancels dropped because the key's
	// state was no longer the one their hits were reserved in.
	staleCancels atomic.Uint64
}

var _ ringlimit.Limiter = (*Limiter)(nil)

// New returns a Limiter that keeps its state in the server(s) behind client.
func New(client valkey.Client, c Config) *Limiter {
	p := c.Prefix
	if p == "" {
		p = DefaultPrefix
	}
	return &Limiter{client: client, prefix: p, clock: c.Clock, lua: scripts, multi: multiScripts, wait: waitScripts, give: giveScript}
}

// Key returns the Valkey key that holds key's state.
func (l *Limiter) Key(key string) string { return l.prefix + "{" + key + "}" }

// AllowN consumes n hits on key if rule admits them now; n == 0 is a Peek.
// Bad input returns an error wrapping a ringlimit sentinel and sends nothing.
func (l *Limiter) AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if err := ringlimit.ValidateCall(key, rule, n); err != nil {
		return ringlimit.Decision{}, err
	}
	return l.decide(ctx, key, rule, n)
}

// Peek reports whether one hit on key would be admitted now, and writes
// nothing: Allowed, RetryAfter and Delay are for one hit; Remaining and
// ResetAfter describe the key as it stands.
func (l *Limiter) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return l.AllowN(ctx, key, rule, 0)
}

// Reset deletes key's states: the one AllowN uses and those of AllowAll's
// other indexes (one script run; they share a slot). A key that holds a
// value the scripts did not write (see ErrBadValue) is left as it is. The
// key's version and claim stay (see VersionKey): a late write of an older
// version is still dropped.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := ringlimit.ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remote: del: %w", err)
	}
	var keys [ringlimit.MaxRules]string
	for i := range keys {
		keys[i] = l.IndexKey(key, i)
	}
	if err := resetScript.Exec(ctx, l.client, keys[:], nil).Error(); err != nil {
		return fmt.Errorf("remote: del: %w", callerErr(ctx, err))
	}
	return nil
}

func (l *Limiter) decide(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	alg := rule.Algorithm
	if err := ctx.Err(); err != nil {
		return ringlimit.Decision{}, fmt.Errorf("remote: eval %s: %w", alg, err)
	}
	now := ""
	if l.clock != nil {
		now = strconv.FormatInt(l.clock.Now().UnixMilli(), 10)
	}
	args := []string{ruleArg(rule), now, strconv.FormatInt(n, 10)}
	script := l.lua[alg].exec
	if n == 0 {
		script = l.lua[alg].peek
	}
	resp := script.Exec(ctx, l.client, []string{l.Key(key)}, args)
	if err := resp.Error(); err != nil {
		return ringlimit.Decision{}, fmt.Errorf("remote: eval %s: %w", alg, callerErr(ctx, err))
	}
	v, err := resp.ToString()
	if err == nil && v == badValue {
		return ringlimit.Decision{}, fmt.Errorf("remote: eval %s: key %s: %w", alg, strconv.Quote(key), ErrBadValue)
	}
	if err != nil || len(v) != replyLen {
		return ringlimit.Decision{}, fmt.Errorf("remote: eval %s: unexpected reply %s: %w", alg, resp.String(), err)
	}
	return ringlimit.Decision{
		Allowed:    word(v, 0) == 1,
		Limit:      rule.Limit,
		Remaining:  word(v, 1),
		RetryAfter: ringlimit.Millis(word(v, 2)),
		ResetAfter: ringlimit.Millis(word(v, 3)),
		Delay:      ringlimit.Millis(word(v, 4)),
		Source:     ringlimit.Store,
	}, nil
}

// replyLen is the length of a script's reply: allowed, remaining, retry
// after, reset after and delay (ms), little-endian int64s.
const replyLen = 5 * 8

// word is the i-th little-endian int64 of s.
func word(s string, i int) int64 {
	var v uint64
	for j := 7; j >= 0; j-- {
		v = v<<8 | uint64(s[8*i+j])
	}
	return int64(v)
}

// callerErr returns the caller's own context error when the context is done,
// whatever the client reported, so callers can tell their cancellation from
// a store failure.
func callerErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}
