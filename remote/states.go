package remote

import (
	"context"

	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"
)

// KeyState is one key's state to store, and how long it matters.
type KeyState struct {
	Key   string // the caller's key; stored under Key(Key)
	State State
	TTL   time.Duration // rounded up to whole ms, at least 1 ms
}

// WriteStates stores each state under its key with its TTL (SET … PX), in
// one pipelined round trip (after a SCRIPT LOAD), as the scripts would have
// stored them. A key that holds a value the scripts did not write (see
// ErrBadValue) is left as it is, and its state is not stored: that is not an
// error. It is not atomic across keys. The error is the first failure (a cancelled context is
// reported as the context's error).
func (l *Limiter) WriteStates(ctx context.Context, states []KeyState) error {
	if len(states) == 0 {
		return nil
	}
	cmds := make(valkey.Commands, 0, len(states))
	for _, ks := range states {
		cmds = append(cmds, l.put(ks, true))
	}
	rs := l.client.DoMulti(ctx, cmds...)
	// The server lost its script cache: send the script itself, once per
	// key that got NOSCRIPT (put is idempotent, nothing ran for those).
	var again valkey.Commands
	for i, r := range rs {
		if noScript(r.Error()) {
			again = append(again, l.put(states[i], false))
		}
	}
	if len(again) > 0 {
		rs = append(rs, l.client.DoMulti(ctx, again...)...)
	}
	for _, r := range rs {
		if noScript(r.Error()) {
			continue // retried above
		}
		if err := r.Error(); err != nil {
			return fmt.Errorf("remote: write %d states: %w", len(states), callerErr(ctx, err))
		}
	}
	return nil
}

// LoadState reads key's state and its remaining TTL; ok is false if the key
// holds none. A key that holds a value the scripts did not write returns an
// error wrapping ErrBadValue (and, for a string, ErrBadState).
func (l *Limiter) LoadState(ctx context.Context, key string) (s State, ttl time.Duration, ok bool, err error) {
	k := l.Key(key)
	rs := l.client.DoMulti(ctx, l.client.B().Get().Key(k).Build(), l.client.B().Pttl().Key(k).Build())
	v, err := rs[0].ToString()
	if valkey.IsValkeyNil(err) {
		return State{}, 0, false, nil
	}
	if ve, isVE := valkey.IsValkeyErr(err); isVE && strings.HasPrefix(ve.Error(), "WRONGTYPE") {
		return State{}, 0, false, fmt.Errorf("remote: load %s: %w", strconv.Quote(key), ErrBadValue)
	}
	if err != nil {
		return State{}, 0, false, fmt.Errorf("remote: load: %w", callerErr(ctx, err))
	}
	pttl, err := rs[1].AsInt64()
	if err != nil {
		return State{}, 0, false, fmt.Errorf("remote: load: pttl: %w", callerErr(ctx, err))
	}
	if s, err = DecodeState([]byte(v)); err != nil {
		return State{}, 0, false, fmt.Errorf("remote: load %s: %w: %w", strconv.Quote(key), ErrBadValue, err)
	}
	if pttl < 0 { // gone in between (-2), or no TTL (-1: not written by us)
		return State{}, 0, false, nil
	}
	return s, time.Duration(pttl) * time.Millisecond, true, nil
}

// WriteStates is the Limiter's WriteStates, or ErrNotConnected.
func (k *Connector) WriteStates(ctx context.Context, states []KeyState) error {
	l, err := k.limiter()
	if err != nil {
		return fmt.Errorf("remote: write: %w", err)
	}
	return l.WriteStates(ctx, states)
}

// LoadState is the Limiter's LoadState, or ErrNotConnected.
func (k *Connector) LoadState(ctx context.Context, key string) (State, time.Duration, bool, error) {
	l, err := k.limiter()
	if err != nil {
		return State{}, 0, false, fmt.Errorf("remote: load: %w", err)
	}
	return l.LoadState(ctx, key)
}

// put is the command that stores ks: EVALSHA of the put script, or EVAL.
func (l *Limiter) put(ks KeyState, sha bool) valkey.Completed {
	ms := max(1, int64((ks.TTL+time.Millisecond-1)/time.Millisecond))
	key, value, ttl := l.Key(ks.Key), valkey.BinaryString(EncodeState(ks.State)), strconv.FormatInt(ms, 10)
	if sha {
		return l.client.B().Evalsha().Sha1(putSHA1).Numkeys(1).Key(key).Arg(value, ttl).Build()
	}
	return l.client.B().Eval().Script(putSource).Numkeys(1).Key(key).Arg(value, ttl).Build()
}

func noScript(err error) bool {
	ve, ok := valkey.IsValkeyErr(err)
	return ok && ve.IsNoScript()
}
