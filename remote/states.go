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

// KeyState is one key's state to store, and how long it matters.
type KeyState struct {
	Key   string // the caller's key; stored under IndexKey(Key, State.Index)
	State State
	TTL   time.Duration // rounded up to whole ms, at least 1 ms
}

// WriteStates stores each state under its key with its TTL (SET … GET PX),
// in one pipelined round trip, as the scripts would have stored them: at
// IndexKey(Key, State.Index), and each of State.More (the key's other
// states, whose TTL is TTL offset by the difference of their Until and
// State.Until) at its own index. It
// never writes over another type: SET … GET refuses a key that holds a hash,
// list, set, zset or stream, and such a key is skipped, not an error (see
// ErrBadValue). (A foreign string under our key is replaced: telling it from
// ours would take a script per key, which costs the write-behind most of its
// throughput; the decision scripts never write over one.) It is not atomic
// across keys. The error is the first other failure (a cancelled context is
// reported as the context's error).
func (l *Limiter) WriteStates(ctx context.Context, states []KeyState) error {
	if len(states) == 0 {
		return nil
	}
	cmds := make(valkey.Commands, 0, len(states))
	for _, ks := range states {
		for j := -1; j < len(ks.State.More); j++ {
			st, ttl := ks.State, ks.TTL
			if j >= 0 { // another index of the key: its TTL is offset by its Until
				st = ks.State.More[j]
				if ttl += time.Duration(st.Until-ks.State.Until) * time.Millisecond; ttl <= 0 {
					continue
				}
			}
			if uint(st.Index) >= ringlimit.MaxRules {
				return fmt.Errorf("remote: write %s: %w: index %d", strconv.Quote(ks.Key), ErrBadState, st.Index)
			}
			// Rounded up without overflowing: a saturated TTL (a state that
			// matters for centuries) is a long TTL, not a negative one.
			ms := int64(ttl / time.Millisecond)
			if ttl%time.Millisecond > 0 {
				ms++
			}
			ms = max(1, ms)
			cmds = append(cmds, l.client.B().Set().Key(l.IndexKey(ks.Key, st.Index)).
				Value(valkey.BinaryString(EncodeState(st))).Get().PxMilliseconds(ms).Build())
		}
	}
	for _, r := range l.client.DoMulti(ctx, cmds...) {
		err := r.Error()
		if err == nil || valkey.IsValkeyNil(err) || wrongType(err) {
			continue
		}
		return fmt.Errorf("remote: write %d states: %w", len(states), callerErr(ctx, err))
	}
	return nil
}

// wrongType reports whether err is the server's WRONGTYPE error: the key
// holds another type.
func wrongType(err error) bool {
	ve, ok := valkey.IsValkeyErr(err)
	return ok && strings.HasPrefix(ve.Error(), "WRONGTYPE")
}

// LoadState reads key's states, index 0 (the one AllowN uses) and the
// others AllowAll keeps beside it, in one round trip, and index 0's
// remaining TTL; ok is false if the key holds no state at any index. The
// states at other indexes come in s.More, each with its own remaining TTL
// in ms in its Until (relative: the caller adds its own now, as it does
// with ttl for index 0). When index 0 has gone (a short window's state
// expires long before a day's), s is a zero State with ttl 0 and ok true if
// another index remains. A key that holds a value the scripts did not write
// returns an error wrapping ErrBadValue (and, for a string, ErrBadState).
func (l *Limiter) LoadState(ctx context.Context, key string) (s State, ttl time.Duration, ok bool, err error) {
	cmds := make(valkey.Commands, 0, 2*ringlimit.MaxRules)
	for i := range ringlimit.MaxRules {
		k := l.IndexKey(key, i)
		cmds = append(cmds, l.client.B().Get().Key(k).Build(), l.client.B().Pttl().Key(k).Build())
	}
	rs := l.client.DoMulti(ctx, cmds...)
	for i := range ringlimit.MaxRules {
		st, pttl, found, err := loadOne(ctx, key, rs[2*i], rs[2*i+1])
		if err != nil {
			return State{}, 0, false, err
		}
		if !found {
			continue
		}
		ok = true
		if i == 0 {
			s, ttl = st, ringlimit.Millis(pttl)
			continue
		}
		st.Index, st.Until = i, pttl
		s.More = append(s.More, st)
	}
	return s, ttl, ok, nil
}

// loadOne decodes one index's GET and PTTL replies: found is false if it
// holds nothing (or is on its way out).
func loadOne(ctx context.Context, key string, get, pttlReply valkey.ValkeyResult) (State, int64, bool, error) {
	v, err := get.ToString()
	if valkey.IsValkeyNil(err) {
		return State{}, 0, false, nil
	}
	if wrongType(err) {
		return State{}, 0, false, fmt.Errorf("remote: load %s: %w", strconv.Quote(key), ErrBadValue)
	}
	if err != nil {
		return State{}, 0, false, fmt.Errorf("remote: load: %w", callerErr(ctx, err))
	}
	pttl, err := pttlReply.AsInt64()
	if err != nil {
		return State{}, 0, false, fmt.Errorf("remote: load: pttl: %w", callerErr(ctx, err))
	}
	s, err := DecodeState([]byte(v))
	if err != nil {
		return State{}, 0, false, fmt.Errorf("remote: load %s: %w: %w", strconv.Quote(key), ErrBadValue, err)
	}
	if pttl < 0 { // gone in between (-2), or no TTL (-1: not written by us)
		return State{}, 0, false, nil
	}
	return s, pttl, true, nil
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
