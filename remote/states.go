package remote

import (
	"context"
	"errors"
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
	// Ver is the state's version: the write is fenced by it (see
	// WriteStates). The zero Version is written only where no version is
	// stored, and stores none.
	Ver Version
}

// writeScript writes one key's states if their version is above the
// stored one (scripts/write.lua).
var writeScript = newEvalScript(source("value.lua", "version.lua", "write.lua"))

// WriteStates stores each state under its key with its TTL, as the
// scripts would have stored them: at IndexKey(Key, State.Index), and each
// of State.More (the key's other states, whose TTL is TTL offset by the
// difference of their Until and State.Until) at its own index. It sends
// one pipelined round trip: a script run (scripts/write.lua) per batch of
// at most 64 keys (on Valkey Cluster, of one slot), the keys in the
// order given.
//
// Each key's write is fenced, and atomic: its states are written only if
// no version is stored for the key, or (Ver.Epoch, Ver.Seq) is above the
// stored one's (lexicographically), and then Ver is stored beside them
// (VersionKey), for as long as the longest of them matters. A write that is
// not above, an equal one included, writes nothing and counts in
// StaleWrites: a late write-behind never overwrites a newer state. A holder
// that writes a key again raises Seq (or Epoch) each time.
//
// It never writes over another type: a state key that holds a hash, list,
// set, zset or stream is skipped, not an error, and so is a key whose
// version key holds something that is not a version (see ErrBadValue). (A
// foreign string under a state key is replaced; the decision scripts never
// write over one.) It is not atomic across keys. The error is the first
// other failure (a cancelled context is reported as the context's error);
// a Ver with Epoch or Seq at or above 2^53, or a state index out of range,
// is refused with an error wrapping ErrBadState before anything is sent.
func (l *Limiter) WriteStates(ctx context.Context, states []KeyState) error {
	if len(states) == 0 {
		return nil
	}
	// The keys go in batches of at most writeBatch, one script run each;
	// on a cluster a batch holds keys of one slot.
	cluster := l.client.Mode() == valkey.ClientModeCluster
	var keys, args [][]string
	var sizes []int
	open := map[uint16]int{} // a slot's batch that has room
	for _, ks := range states {
		if err := checkVersion(ks.Ver); err != nil {
			return fmt.Errorf("remote: write %s: %w", strconv.Quote(ks.Key), err)
		}
		var slot uint16
		if cluster {
			slot = l.Slot(ks.Key)
		}
		b, ok := open[slot]
		if !ok || sizes[b] == writeBatch {
			b = len(sizes)
			open[slot] = b
			keys, args, sizes = append(keys, nil), append(args, nil), append(sizes, 0)
		}
		sizes[b]++
		k := append(keys[b], l.VersionKey(ks.Key))
		a := append(args[b], valkey.BinaryString(encodeVersion(ks.Ver)), "")
		at, m := len(a)-1, 0 // where the number of its states goes, and it
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
			k = append(k, l.IndexKey(ks.Key, st.Index))
			if st.Algorithm == ringlimit.TokenBucket || st.Algorithm == ringlimit.LeakyBucket {
				// Without its epoch: a value the release before reads too
				// (the reservations made in it are the writer's to cancel).
				st.C = 0
			}
			a = append(a, valkey.BinaryString(EncodeState(st)), strconv.FormatInt(ms, 10))
			m++
		}
		a[at] = strconv.Itoa(m)
		keys[b], args[b] = k, a
	}
	var first error
	for i, r := range writeScript.do(ctx, l.client, keys, args) {
		v, err := r.ToString()
		switch {
		case r.Error() != nil:
			err = fmt.Errorf("remote: write %d states: %w", len(states), callerErr(ctx, r.Error()))
		case err != nil:
			err = fmt.Errorf("remote: write %d states: unexpected reply %s: %w", len(states), r.String(), err)
		case len(v) != sizes[i]:
			err = fmt.Errorf("remote: write %d states: unexpected reply %s", len(states), r.String())
		default:
			l.stale.Add(uint64(strings.Count(v, "0")))
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// writeBatch is the most keys one run of the write script writes. A key
// costs the server four commands in the script (GET and SET of its version,
// PTTL, SET … GET of its state), 5–25 µs on a loaded 2-core machine
// (BenchmarkWriteStates), so a run holds other callers up for at most a
// ms or so, and its own call overhead is spread over 64 keys.
const writeBatch = 64

// StaleWrites is how many keys' writes WriteStates dropped as not above
// the stored version, since l was made.
func (l *Limiter) StaleWrites() uint64 { return l.stale.Load() }

// VersionKey returns the Valkey key that holds key's version, and
// ClaimKey the one that holds its claim: Key(key) + "#v" and "#c", under
// the key's hash tag (as IndexKey), so one script reads and writes them
// with the key's states on Valkey Cluster too.
func (l *Limiter) VersionKey(key string) string { return l.Key(key) + "#v" }

// ClaimKey: see VersionKey.
func (l *Limiter) ClaimKey(key string) string { return l.Key(key) + "#c" }

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
	return decodeOne(key, v, pttl)
}

// decodeOne decodes one index's value and PTTL: found is false if it has
// no TTL (-1: not written by us) or is gone (-2).
func decodeOne(key, v string, pttl int64) (State, int64, bool, error) {
	s, err := DecodeState([]byte(v))
	if err != nil {
		return State{}, 0, false, fmt.Errorf("remote: load %s: %w: %w", strconv.Quote(key), ErrBadValue, err)
	}
	if pttl < 0 { // gone in between (-2), or no TTL (-1: not written by us)
		return State{}, 0, false, nil
	}
	return s, pttl, true, nil
}

// claimScript loads a key's states and claims the key (scripts/claim.lua).
var claimScript = valkey.NewLuaScript(source("value.lua", "version.lua", "claim.lua"))

// ClaimState is LoadState with a claim, in one script: a new owner that
// found the key's state at no member loads it from the store and claims
// the key, so that two members that take one key from the store apart do
// not both start it.
//
// A claim by another member (ClaimKey) stands unless that member is one of
// c.Cleared: then nothing is loaded or claimed, and Loaded.Holder and
// HolderInc name it. Otherwise the key is c.Member's (in incarnation
// c.Inc) for c.TTL, and Loaded carries what LoadState would return and the
// stored version (zero if none). c.Member's own claim, of any
// incarnation, is taken again.
//
// A bad key or claim is refused with an error wrapping its sentinel
// (ringlimit.ErrInvalidKey, ErrBadClaim) before anything is sent. A key
// whose states, version or claim hold something not ours returns an error
// wrapping ErrBadValue, and nothing is claimed (but for a sliding log whose
// entries, past a well-formed header, are corrupt: it is claimed, and then
// refused as LoadState refuses it).
func (l *Limiter) ClaimState(ctx context.Context, key string, c Claim) (Loaded, error) {
	if err := ringlimit.ValidateKey(key); err != nil {
		return Loaded{}, err
	}
	if err := c.check(); err != nil {
		return Loaded{}, err
	}
	keys := make([]string, 0, ringlimit.MaxRules+2)
	for i := range ringlimit.MaxRules {
		keys = append(keys, l.IndexKey(key, i))
	}
	keys = append(keys, l.VersionKey(key), l.ClaimKey(key))
	ms := int64(c.TTL / time.Millisecond)
	if c.TTL%time.Millisecond > 0 {
		ms++
	}
	args := make([]string, 0, 2+len(c.Cleared))
	args = append(args, valkey.BinaryString(encodeClaim(c.Member, c.Inc)), strconv.FormatInt(ms, 10))
	args = append(args, c.Cleared...)
	resp := claimScript.Exec(ctx, l.client, keys, args)
	if err := resp.Error(); err != nil {
		return Loaded{}, fmt.Errorf("remote: claim: %w", callerErr(ctx, err))
	}
	if v, err := resp.ToString(); err == nil && v == badValue {
		return Loaded{}, fmt.Errorf("remote: claim %s: %w", strconv.Quote(key), ErrBadValue)
	}
	arr, err := resp.ToArray()
	if err != nil || len(arr) != 1 && len(arr) != 1+2*ringlimit.MaxRules {
		return Loaded{}, fmt.Errorf("remote: claim: unexpected reply %s: %w", resp.String(), err)
	}
	first, err := arr[0].ToString()
	if err != nil {
		return Loaded{}, fmt.Errorf("remote: claim: unexpected reply %s: %w", resp.String(), err)
	}
	if len(arr) == 1 { // another member's claim stands
		who, inc, err := decodeClaim([]byte(first))
		if err != nil {
			return Loaded{}, fmt.Errorf("remote: claim %s: %w: %w", strconv.Quote(key), ErrBadValue, err)
		}
		return Loaded{Holder: who, HolderInc: inc}, nil
	}
	var out Loaded
	if first != "" {
		if out.Ver, err = decodeVersion([]byte(first)); err != nil {
			return Loaded{}, fmt.Errorf("remote: claim %s: %w: %w", strconv.Quote(key), ErrBadValue, err)
		}
	}
	for i := range ringlimit.MaxRules {
		v, verr := arr[1+2*i].ToString()
		pttl, perr := arr[2+2*i].AsInt64()
		if verr != nil || perr != nil {
			return Loaded{}, fmt.Errorf("remote: claim: unexpected reply %s: %w", resp.String(), errors.Join(verr, perr))
		}
		if v == "" {
			continue
		}
		st, pttl, found, err := decodeOne(key, v, pttl)
		if err != nil {
			return Loaded{}, err
		}
		if !found {
			continue
		}
		out.Found = true
		if i == 0 {
			out.State, out.TTL = st, ringlimit.Millis(pttl)
			continue
		}
		st.Index, st.Until = i, pttl
		out.State.More = append(out.State.More, st)
	}
	return out, nil
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

// ClaimState is the Limiter's ClaimState, or ErrNotConnected.
func (k *Connector) ClaimState(ctx context.Context, key string, c Claim) (Loaded, error) {
	l, err := k.limiter()
	if err != nil {
		if verr := ringlimit.ValidateKey(key); verr != nil {
			return Loaded{}, verr
		}
		if verr := c.check(); verr != nil {
			return Loaded{}, verr
		}
		return Loaded{}, fmt.Errorf("remote: claim: %w", err)
	}
	return l.ClaimState(ctx, key, c)
}

// StaleWrites is the Limiter's StaleWrites (0 until connected).
func (k *Connector) StaleWrites() uint64 {
	if l := k.lim.Load(); l != nil {
		return l.StaleWrites()
	}
	return 0
}
