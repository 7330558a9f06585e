package remote

import (
	"strconv"
	"strings"

	"github.com/ringlimit/ringlimit"
)

// SetTTLPad makes l run copies of the scripts that add ms to every TTL they
// set. Tests that drive a manual clock use it so that the server's own clock
// never expires state that the manual clock still needs (local keeps such
// state too). The production scripts have no such knob.
func SetTTLPad(l *Limiter, ms int64) {
	l.lua = buildScripts(func(alg ringlimit.Algorithm) string { return PaddedScript(alg, ms) })
	l.multi = buildMulti(pad(MultiScript(), ms))
}

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
