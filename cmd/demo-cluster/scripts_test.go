package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/remote"
)

// ringlimit's own scripts give the same replies, and leave the same values,
// on the embedded store as on a real server, for random calls at injected
// instants (ARGV[2]), peeks and resets included. paddedScript lengthens
// every TTL by an hour: the injected clock runs apart from the server's,
// which would otherwise expire keys at other instants than the injected ones.
func TestEmbeddedRunsRemoteScripts(t *testing.T) {
	real := valkeytest.Start(t)
	emb := startEmbedded(t)
	a, b := dialResp(t, emb.Addr()), dialResp(t, real.Addr())

	rng := rand.New(rand.NewPCG(1, 2))
	now := int64(1_700_000_000_000)
	allowed := 0
	const steps = 3000
	for i := range steps {
		seg := rand.New(rand.NewPCG(uint64(i/300), 7)) // one rule per 300 steps
		rule := ringlimit.Rule{Algorithm: ringlimit.Algorithm(i / 300 % 5), Limit: int64(1 + seg.IntN(20)),
			Window: time.Duration(100+seg.IntN(5000)) * time.Millisecond, Burst: int64(seg.IntN(5))}
		key := fmt.Sprintf("rl:{%c}", 'a'+rng.IntN(3))
		n := int64(rng.IntN(3)) // 0 is a peek
		n = min(n, rule.Capacity())
		now += int64(rng.IntN(40))
		packed := make([]byte, 25)
		packed[0] = byte(rule.Algorithm)
		binary.LittleEndian.PutUint64(packed[1:], uint64(rule.WindowMillis()))
		binary.LittleEndian.PutUint64(packed[9:], uint64(rule.Limit))
		binary.LittleEndian.PutUint64(packed[17:], uint64(rule.Burst))
		args := []string{"EVAL", paddedScript(t, rule.Algorithm), "1", key, string(packed), strconv.FormatInt(now, 10), strconv.FormatInt(n, 10)}
		got, want := a.do(t, args...), b.do(t, args...)
		if _, isErr := want.(error); isErr || got != want {
			t.Fatalf("step %d, %s %+v n=%d: embedded %q, server %q", i, key, rule, n, got, want)
		}
		if s, ok := got.(string); ok && len(s) == 40 && s[0] == 1 && n > 0 {
			allowed++
		}
		if got, want := a.do(t, "GET", key), b.do(t, "GET", key); got != want {
			t.Fatalf("step %d: value of %s: embedded %q, server %q", i, key, got, want)
		}
		if rng.IntN(50) == 0 {
			a.do(t, "DEL", key)
			b.do(t, "DEL", key)
		}
	}
	if allowed < steps/10 || allowed > steps*9/10 {
		t.Errorf("%d of %d calls admitted: the rules should admit some and deny some", allowed, steps)
	}
}

// paddedScript is remote.Script(alg) with an hour added to every TTL it sets.
func paddedScript(t *testing.T, alg ringlimit.Algorithm) string {
	const ttl = "untilms - now)"
	src := remote.Script(alg)
	if !strings.Contains(src, ttl) {
		t.Fatal("the prelude's TTL expression changed; update paddedScript")
	}
	return strings.Replace(src, ttl, "untilms - now + 3600000)", 1)
}
