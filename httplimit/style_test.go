package httplimit_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/rules"
)

// Each header style against the form of its draft's examples:
//
//	draft 7:  RateLimit: limit=10, remaining=1, reset=7
//	          RateLimit-Policy: 10;w=1, 50;w=60, 1000;w=3600, 5000;w=86400
//	draft 11: RateLimit-Policy: "burst";q=100;w=60
//	          RateLimit: "default";r=50;t=30
//	legacy:   X-RateLimit-* alone.
func TestHeaderStyles(t *testing.T) {
	set, err := rules.Parse([]byte(`
rules:
  - {name: second, key: ip, algorithm: fixed_window, limit: 10, window: 1s}
  - {name: minute, key: ip, algorithm: fixed_window, limit: 50, window: 60s}
  - {name: hour,   key: ip, algorithm: fixed_window, limit: 1000, window: 3600s}
  - {name: day,    key: ip, algorithm: fixed_window, limit: 5000, window: 86400s}
`))
	if err != nil {
		t.Fatal(err)
	}
	at := t0.Add(300 * time.Millisecond) // 0.7 s left in the second, 59.7 s in the minute
	for _, c := range []struct {
		name  string
		opts  []httplimit.Option
		after map[string]string // after 9 requests: the second's window binds, 1 left
		deny  map[string]string // the 11th request in the same second
	}{
		{"default is draft 11", nil, map[string]string{
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1",
			"RateLimit-Policy": `"second";q=10;w=1, "minute";q=50;w=60, "hour";q=1000;w=3600, "day";q=5000;w=86400`,
			"RateLimit":        `"second";r=1;t=1`, // the binding one
		}, map[string]string{
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1",
			"RateLimit-Policy": `"second";q=10;w=1`, // the first rule denies: later ones are not applied
			"RateLimit":        `"second";r=0;t=1`,
			"Retry-After":      "1",
		}},
		{"draft 7", []httplimit.Option{httplimit.WithHeaderStyle(httplimit.HeadersDraft7)}, map[string]string{
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1",
			"RateLimit-Policy": "10;w=1, 50;w=60, 1000;w=3600, 5000;w=86400",
			"RateLimit":        "limit=10, remaining=1, reset=1",
		}, map[string]string{
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1",
			"RateLimit-Policy": "10;w=1",
			"RateLimit":        "limit=10, remaining=0, reset=1",
			"Retry-After":      "1",
		}},
		{"legacy", []httplimit.Option{httplimit.WithHeaderStyle(httplimit.HeadersLegacy)}, map[string]string{
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "1",
		}, map[string]string{
			"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1",
			"Retry-After": "1",
		}},
	} {
		h := httplimit.New(newRecorder(at), append(c.opts, httplimit.WithRules(set))...)(new(counting))
		for range 8 {
			get(h, "/")
		}
		checkHeaders(t, c.name+": 9th", get(h, "/"), c.after)
		get(h, "/")
		w := get(h, "/")
		if w.Code != 429 {
			t.Fatalf("%s: 11th request: %d, want 429", c.name, w.Code)
		}
		checkHeaders(t, c.name+": 11th", w, c.deny)
	}
}
