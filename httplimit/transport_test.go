package httplimit_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/local"
)

// seenWaiter admits everything and records each wait's key and how long
// its context allowed (-1: no deadline).
type seenWaiter struct {
	keys  []string
	bound []time.Duration
}

func (w *seenWaiter) WaitN(ctx context.Context, key string, _ ringlimit.Rule, _ int64) (ringlimit.Decision, error) {
	w.keys = append(w.keys, key)
	b := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		b = time.Until(dl)
	}
	w.bound = append(w.bound, b)
	return ringlimit.Decision{Allowed: true}, nil
}

func okBase() http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
}

// A request with no deadline waits at most MaxWait (DefaultMaxWait, 30 s,
// when zero; unbounded when negative); an earlier deadline of its own
// stands. (Before MaxWait, a request with no deadline waited unbounded.)
// In a synctest bubble, so the bounds are exact.
func TestTransportMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			name string
			max  time.Duration
			own  time.Duration // the request's own deadline from now; 0: none
			want time.Duration
		}{
			{"default", 0, 0, httplimit.DefaultMaxWait},
			{"set", 250 * time.Millisecond, 0, 250 * time.Millisecond},
			{"own deadline earlier", 250 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond},
			{"own deadline later", 250 * time.Millisecond, time.Hour, 250 * time.Millisecond},
			{"unbounded", -1, 0, -1},
		} {
			w := &seenWaiter{}
			tr := &httplimit.Transport{Waiter: w, Rule: tenth, Base: okBase(), MaxWait: c.max}
			ctx := context.Background()
			if c.own > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.own)
				defer cancel()
			}
			resp, err := tr.RoundTrip(httptest.NewRequestWithContext(ctx, "GET", "https://api.example/", nil))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if w.bound[0] != c.want {
				t.Errorf("%s: the wait was bounded by %s, want %s", c.name, w.bound[0], c.want)
			}
		}
	})
}

// A queue that reaches past MaxWait refuses the request at once,
// consuming nothing, instead of holding it: on 1 per 100 ms, with
// MaxWait 250 ms, a request whose turn is 300 ms off fails with
// ErrWaitTooLong at once.
func TestTransportMaxWaitRefusesALongQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := local.New(local.Config{})
		tr := &httplimit.Transport{Waiter: l, Rule: tenth, Base: okBase(), MaxWait: 250 * time.Millisecond}
		key := httplimit.HostKey(httptest.NewRequest("GET", "https://api.example/", nil))
		for range 3 { // turns at 0, 100 and 200 ms, reserved by others: the next's is 300 ms
			if _, err := l.ReserveN(time.Now(), key, tenth, 1, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		_, err := tr.RoundTrip(httptest.NewRequest("GET", "https://api.example/", nil))
		if !errors.Is(err, ringlimit.ErrWaitTooLong) || time.Since(start) != 0 {
			t.Fatalf("a turn 300 ms off, MaxWait 250 ms: %v after %s, want ErrWaitTooLong at once", err, time.Since(start))
		}
	})
}

// The default key is the host, lower-cased, without a trailing dot, with
// the scheme's default port made explicit: one host has one limit. (It
// was "client:"+URL.Host: one host had a budget per spelling.)
func TestTransportKeyNormalised(t *testing.T) {
	w := &seenWaiter{}
	tr := &httplimit.Transport{Waiter: w, Rule: tenth, Base: okBase()}
	get := func(url string) string {
		t.Helper()
		w.keys = w.keys[:0]
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", url, nil))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return w.keys[0]
	}
	for _, group := range [][]string{
		{"https://api.example/", "https://API.Example/x", "https://api.example:443/", "HTTPS://api.example./"},
		{"http://api.example/", "http://api.example:80/"},
		{"https://api.example:8443/"},
		{"https://other.example/"},
		{"http://[::1]/", "http://[::1]:80/"},
	} {
		want := get(group[0])
		for _, u := range group[1:] {
			if got := get(u); got != want {
				t.Errorf("%s counts under %q, %s under %q: want one key", group[0], want, u, got)
			}
		}
	}
	seen := map[string]bool{}
	for _, u := range []string{"https://api.example/", "http://api.example/", "https://api.example:8443/", "https://other.example/", "http://[::1]/"} {
		k := get(u)
		if seen[k] {
			t.Errorf("%s shares the key %q with another host or port", u, k)
		}
		seen[k] = true
	}
	if k := get("https://API.example/"); k != "client:api.example:443" {
		t.Errorf("key %q, want client:api.example:443", k)
	}
}
