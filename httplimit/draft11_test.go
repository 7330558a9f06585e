package httplimit_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
)

// draft-ietf-httpapi-ratelimit-headers-11: Retry-After SHOULD NOT be earlier
// than the end of the effective window t. On a 429, t is Retry-After, as the
// draft's own example sends it (RateLimit: "default";r=0;t=50 with
// Retry-After: 50); an admitted request's t is still the time to full
// capacity. The token bucket and the sliding window are the cases where the
// two differ: 5 per 60 s refills one token every 12 s, so a blocked caller
// may retry in 12 s while the bucket is full again only in 60.
func TestRetryAfterNotBeforeT(t *testing.T) {
	for _, c := range []struct {
		name       string
		rule       ringlimit.Rule
		retry, rst string // the 429's Retry-After and the last admitted response's t
	}{
		{"token bucket", ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 5, Window: time.Minute}, "12", "60"},
		{"sliding window", ringlimit.Rule{Algorithm: ringlimit.SlidingWindow, Limit: 5, Window: time.Minute}, "", ""},
		{"fixed window", ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 5, Window: time.Minute}, "60", "60"},
	} {
		for _, style := range []httplimit.HeaderStyle{httplimit.HeadersDraft11, httplimit.HeadersDraft10} {
			name := fmt.Sprintf("%s, style %d", c.name, style)
			lim := newRecorder(t0)
			h := httplimit.New(lim, httplimit.WithRule("api", c.rule), httplimit.WithHeaderStyle(style))(new(counting))
			var last string
			for range 5 {
				last = get(h, "/").Header().Get("RateLimit")
			}
			w := get(h, "/")
			if w.Code != 429 {
				t.Fatalf("%s: 6th request %d, want 429", name, w.Code)
			}
			retry := w.Header().Get("Retry-After")
			d := lim.lastDecision()
			if c.retry != "" && (retry != c.retry || last != `"api";r=0;t=`+c.rst) {
				t.Errorf("%s: Retry-After %s after RateLimit %s, want %s after t=%s", name, retry, last, c.retry, c.rst)
			}
			if got, want := w.Header().Get("RateLimit"), `"api";r=0;t=`+retry; got != want {
				t.Errorf("%s: 429's RateLimit %s with Retry-After %s (decision %+v), want %s", name, got, retry, d, want)
			}
			if ra, err := strconv.Atoi(retry); err != nil || ra < 1 {
				t.Errorf("%s: Retry-After %q", name, retry)
			}
		}
	}
}

// HeadersDraft11 is the default's name, and HeadersDraft10 the same style.
func TestDraft11IsDefault(t *testing.T) {
	if httplimit.HeadersDraft10 != httplimit.HeadersDraft11 {
		t.Fatalf("HeadersDraft10 %d is not HeadersDraft11 %d", httplimit.HeadersDraft10, httplimit.HeadersDraft11)
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 5, Window: time.Minute}
	def := get(httplimit.New(newRecorder(t0), httplimit.WithRule("api", rule))(new(counting)), "/")
	d11 := get(httplimit.New(newRecorder(t0), httplimit.WithRule("api", rule), httplimit.WithHeaderStyle(httplimit.HeadersDraft11))(new(counting)), "/")
	for _, k := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if def.Header().Get(k) != d11.Header().Get(k) || def.Header().Get(k) == "" {
			t.Errorf("%s: default %q, draft 11 %q", k, def.Header().Get(k), d11.Header().Get(k))
		}
	}
}
