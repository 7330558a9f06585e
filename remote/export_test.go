package remote

import (
	"strconv"
	"strings"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
)

// SetTTLPad makes l run copies of the scripts that add ms to every TTL they
// set. Tests that drive a manual clock use it so that the server's own clock
// never expires state that the manual clock still needs (local keeps such
// state too). The production scripts have no such knob.
func SetTTLPad(l *Limiter, ms int64) {
	l.lua = buildScripts(func(alg ringlimit.Algorithm) string { return PaddedScript(alg, ms) })
	l.multi = buildMulti(pad(MultiScript(), ms))
	l.wait = buildWait(func(src string) string { return pad(src, ms) })
	l.give = valkey.NewLuaScript(pad(giveSource(), ms))
}

// ParseGive is parseGive, for its fuzz target.
func ParseGive(v string, rule ringlimit.Rule, n int64) (int64, error) { return parseGive(v, rule, n) }

// PaddedScript is Script(alg) with ms added to every TTL it sets.
func PaddedScript(alg ringlimit.Algorithm, ms int64) string {
	return pad(Script(alg), ms)
}

func pad(src string, ms int64) string {
	const ttl = "untilms - now)"
	if !strings.Contains(src, ttl) {
		panic("remote: the prelude's TTL expression changed; update PaddedScript")
	}
	return strings.Replace(src, ttl, "untilms - now + "+strconv.FormatInt(ms, 10)+")", 1)
}

// SetLogTuning is SetTTLPad, with the sliding log reading probe entries in
// one piece before it halves, and its compaction copying chunk bytes a call
// (instead of 32 and 65536), so that short tests reach every path.
func SetLogTuning(l *Limiter, ttlPad int64, probe, chunk int) {
	const knobs = "PROBE, CH, KEEP = 73, 32, 65536,"
	edit := func(src string) string {
		if !strings.Contains(src, knobs) {
			panic("remote: sliding_log.lua's knobs changed; update SetLogTuning")
		}
		return strings.Replace(src, knobs, "PROBE, CH, KEEP = 73, "+strconv.Itoa(probe)+", "+strconv.Itoa(chunk)+",", 1)
	}
	l.lua = buildScripts(func(alg ringlimit.Algorithm) string {
		if alg != ringlimit.SlidingLog {
			return PaddedScript(alg, ttlPad)
		}
		return edit(PaddedScript(alg, ttlPad))
	})
	l.multi = buildMulti(edit(pad(MultiScript(), ttlPad)))
}

// The stored forms of versions and claims, for the fuzz targets.
var (
	EncodeVersion = encodeVersion
	DecodeVersion = decodeVersion
	EncodeClaim   = encodeClaim
	DecodeClaim   = decodeClaim
)
