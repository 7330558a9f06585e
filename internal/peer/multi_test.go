package peer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

func allowAllSamples() ([]Request, []Result) {
	rules := []ringlimit.Rule{
		{Algorithm: ringlimit.FixedWindow, Limit: 10, Window: time.Second},
		{Algorithm: ringlimit.TokenBucket, Limit: 25, Window: 10 * time.Second, Burst: 30},
	}
	reqs := []Request{
		{Op: OpAllowAll, Key: "k", Rules: rules, N: 2},
		{Op: OpAllowAll, Key: "key:é", Rules: rules[:1], N: 0, From: "n3"},
	}
	ds := []ringlimit.Decision{
		{Allowed: true, Limit: 10, Remaining: 8, ResetAfter: time.Second, Source: ringlimit.Local},
		{Allowed: false, Limit: 25, RetryAfter: 400 * time.Millisecond, Delay: 3 * time.Millisecond, Source: ringlimit.Local},
	}
	res := []Result{{Decision: ds[0], Decisions: ds}, {Decision: ds[0], Decisions: ds[:1]}}
	return reqs, res
}

func TestAllowAllRoundTrip(t *testing.T) {
	reqs, res := allowAllSamples()
	for _, r := range reqs {
		b := appendRequest(nil, 9, &r)
		typ, _, n, err := parseHeader(b[:headerLen])
		if err != nil || typ != typeAllowAll || n != len(b)-headerLen {
			t.Fatalf("header: %d %d %v", typ, n, err)
		}
		got, err := parseRequest(typ, b[headerLen:])
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("request %+v → %+v, %v", r, got, err)
		}
	}
	for _, r := range res {
		got, err := parseResult(appendResult(nil, 9, &r)[headerLen:])
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("result %+v → %+v, %v", r, got, err)
		}
	}
}

func TestAllowAllMalformed(t *testing.T) {
	reqs, res := allowAllSamples()
	body := appendRequest(nil, 1, &reqs[0])[headerLen:]
	nine := append([]byte(nil), body...)
	nine[1] = ringlimit.MaxRules + 1
	zero := append([]byte(nil), body...)
	zero[1] = 0
	for name, b := range map[string][]byte{"empty": nil, "short": body[:20], "nine rules, two sent": nine} {
		if _, err := parseRequest(typeAllowAll, b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// No rules is well formed, but no call: the owner answers it with
	// ErrInvalidRule and keeps the connection (TestBadCallKeepsTheConnection).
	if _, err := parseRequest(typeAllowAll, zero); !errors.Is(err, ringlimit.ErrInvalidRule) || errors.Is(err, ErrMalformed) {
		t.Errorf("no rules: %v", err)
	}
	rb := appendResult(nil, 1, &res[0])[headerLen:]
	for name, b := range map[string][]byte{"cut": rb[:len(rb)-1], "long": append(rb[:len(rb):len(rb)], 0)} {
		if _, err := parseResult(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("result %s: %v", name, err)
		}
	}
}

// TestWriteAllowAllCorpus writes the AllowAll frames into FuzzParse's
// corpus when PEER_WRITE_CORPUS is set (they are checked in).
func TestWriteAllowAllCorpus(t *testing.T) {
	if os.Getenv("PEER_WRITE_CORPUS") == "" {
		t.Skip("set PEER_WRITE_CORPUS=1 to write the corpus")
	}
	reqs, res := allowAllSamples()
	var frames [][]byte
	for i := range reqs {
		frames = append(frames, appendRequest(nil, 1, &reqs[i]))
	}
	for i := range res {
		frames = append(frames, appendResult(nil, 1, &res[i]))
	}
	for i, f := range frames {
		p := filepath.Join("testdata", "fuzz", "FuzzParse", fmt.Sprintf("allowall-%d", i))
		if err := os.WriteFile(p, fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
