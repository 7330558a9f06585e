package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/rules"
)

// discard is a ResponseWriter that keeps headers and drops the rest, so the
// benchmark measures the middleware, not a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

var noop = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// Rules generous enough that every request is allowed: the common path.
var benchRule = ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1 << 40, Window: time.Millisecond}

func benchMiddleware(b *testing.B, h http.Handler) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest("GET", "/api/posts", nil)
		w := &discard{h: make(http.Header, 8)}
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, r)
		}
	})
}

func BenchmarkBaseline(b *testing.B) { benchMiddleware(b, noop) }

func BenchmarkFixedRule(b *testing.B) {
	benchMiddleware(b, httplimit.New(local.New(local.Config{}), httplimit.WithRule("api", benchRule))(noop))
}

func BenchmarkRuleSet(b *testing.B) {
	set, err := rules.Parse([]byte(fmt.Sprintf(`rules:
  - name: posts
    endpoint: /api/posts
    limit: %d
    window: 1ms
  - name: login
    endpoint: /api/login
    limit: 10
    window: 60s
`, benchRule.Limit)))
	if err != nil {
		b.Fatal(err)
	}
	benchMiddleware(b, httplimit.New(local.New(local.Config{}), httplimit.WithRules(set))(noop))
}
