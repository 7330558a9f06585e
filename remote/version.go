package remote

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Version orders the states of one key across holders (the same fields as
// the node's internal/hold.Version): Epoch rises when the state changes
// hands, Seq counts the holder's writes within its epoch, and Origins name
// the fresh starts the state counts. The store orders versions by (Epoch,
// Seq) alone and keeps Origins as they come. Epoch and Seq must be below
// 2^53 (the scripts compare them as Lua numbers); the zero Version is "no
// version".
type Version struct {
	Epoch, Seq uint64
	Origins    [3]uint64
}

// above reports whether v orders after w.
func (v Version) above(w Version) bool {
	return v.Epoch > w.Epoch || v.Epoch == w.Epoch && v.Seq > w.Seq
}

// versionLen is the length of a stored version: Epoch, Seq and the three
// Origins, uint64 little-endian each.
const versionLen = 5 * 8

// encodeVersion returns the stored form of v.
func encodeVersion(v Version) []byte {
	b := make([]byte, 0, versionLen)
	for _, x := range [...]uint64{v.Epoch, v.Seq, v.Origins[0], v.Origins[1], v.Origins[2]} {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// decodeVersion parses a stored version: exactly versionLen bytes, Epoch
// and Seq below 2^53. Its errors wrap ErrBadState.
func decodeVersion(b []byte) (Version, error) {
	if len(b) != versionLen {
		return Version{}, fmt.Errorf("%w: version of %d bytes", ErrBadState, len(b))
	}
	le := binary.LittleEndian
	v := Version{Epoch: le.Uint64(b), Seq: le.Uint64(b[8:])}
	for i := range v.Origins {
		v.Origins[i] = le.Uint64(b[16+8*i:])
	}
	if err := checkVersion(v); err != nil {
		return Version{}, err
	}
	return v, nil
}

// checkVersion refuses a version the scripts cannot compare exactly.
func checkVersion(v Version) error {
	if v.Epoch >= 1<<53 || v.Seq >= 1<<53 {
		return fmt.Errorf("%w: version epoch %d, seq %d (at most 2^53-1 each)", ErrBadState, v.Epoch, v.Seq)
	}
	return nil
}

// Claim is what ClaimState claims: that Member (in incarnation Inc) takes
// the key from the store, for TTL.
type Claim struct {
	Member string // the member that loads; 1 to MaxMemberLen bytes
	Inc    uint64 // its incarnation
	// Cleared are the members whose claims no longer stand: the pull
	// found them empty, or gave up on them.
	Cleared []string
	// TTL is how long the claim stands: the longest a state may matter.
	// Rounded up to whole ms; it must be positive.
	TTL time.Duration
}

// MaxMemberLen is the longest Claim.Member.
const MaxMemberLen = 255

// ErrBadClaim: ClaimState was given a Claim it refuses (an empty or too
// long Member, a TTL not above zero).
var ErrBadClaim = errors.New("remote: bad claim")

// check refuses a bad claim with an error wrapping ErrBadClaim.
func (c Claim) check() error {
	if c.Member == "" || len(c.Member) > MaxMemberLen {
		return fmt.Errorf("%w: member of %d bytes (1 to %d)", ErrBadClaim, len(c.Member), MaxMemberLen)
	}
	if c.TTL <= 0 {
		return fmt.Errorf("%w: TTL %v", ErrBadClaim, c.TTL)
	}
	return nil
}

// encodeClaim returns the stored form of a claim: Inc (uint64
// little-endian), then Member.
func encodeClaim(member string, inc uint64) []byte {
	return append(binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(member)), inc), member...)
}

// decodeClaim parses a stored claim: 8 bytes of incarnation, then a member
// of 1 to MaxMemberLen bytes. Its errors wrap ErrBadState.
func decodeClaim(b []byte) (member string, inc uint64, err error) {
	if len(b) < 9 || len(b) > 8+MaxMemberLen {
		return "", 0, fmt.Errorf("%w: claim of %d bytes", ErrBadState, len(b))
	}
	return string(b[8:]), binary.LittleEndian.Uint64(b), nil
}

// Loaded is the result of ClaimState.
type Loaded struct {
	State State         // as LoadState returns it: index 0, the others in More
	TTL   time.Duration // index 0's remaining TTL, as LoadState returns it
	Found bool          // the key holds a state at some index
	Ver   Version       // the stored version; zero if none
	// Holder is not "" if another member's claim stands: then nothing was
	// loaded or claimed, and HolderInc is that member's incarnation.
	Holder    string
	HolderInc uint64
}

// evalScript is a script run in pipelines of EVALSHA: valkey.Lua's
// ExecMulti loads the script on every node before each pipeline, a round
// trip to every master a call, so the write-behind sends EVALSHA itself and
// EVAL only for the commands that found no script (NOSCRIPT: they did not
// run).
type evalScript struct{ src, sha string }

func newEvalScript(src string) *evalScript {
	h := sha1.Sum([]byte(src))
	return &evalScript{src: src, sha: hex.EncodeToString(h[:])}
}

// do runs one call of s per element of keys and args in one pipelined
// round trip (split by slot on a cluster), and runs again as EVAL those
// that found no script.
func (s *evalScript) do(ctx context.Context, c valkey.Client, keys, args [][]string) []valkey.ValkeyResult {
	cmds := make(valkey.Commands, len(keys))
	for i := range keys {
		cmds[i] = c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(keys[i]))).Key(keys[i]...).Arg(args[i]...).Build()
	}
	rs := c.DoMulti(ctx, cmds...)
	var again valkey.Commands
	var at []int
	for i, r := range rs {
		if noScript(r.Error()) {
			again = append(again, c.B().Eval().Script(s.src).Numkeys(int64(len(keys[i]))).Key(keys[i]...).Arg(args[i]...).Build())
			at = append(at, i)
		}
	}
	if len(again) > 0 {
		for j, r := range c.DoMulti(ctx, again...) {
			rs[at[j]] = r
		}
	}
	return rs
}

// noScript reports whether err is the server's NOSCRIPT error: the script
// was not in its cache, and did not run.
func noScript(err error) bool {
	ve, ok := valkey.IsValkeyErr(err)
	return ok && ve.IsNoScript()
}
