package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/rules"
)

func Example() {
	// The article's rules: 5 posts and 10 logins per minute per client IP.
	set, err := rules.Load("../rules/testdata/article.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	limit := httplimit.New(local.New(local.Config{}),
		httplimit.WithRules(set), // or a *rules.Watcher, to reload the file while running
		httplimit.WithClientIP(httplimit.ClientIP{
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		}))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/posts", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "posted") })
	srv := limit(mux)

	for i := range 6 {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest("POST", "/api/posts", nil))
		fmt.Println(i+1, w.Code, w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// 1 200 4 "/api/posts";q=5;w=60
	// 2 200 3 "/api/posts";q=5;w=60
	// 3 200 2 "/api/posts";q=5;w=60
	// 4 200 1 "/api/posts";q=5;w=60
	// 5 200 0 "/api/posts";q=5;w=60
	// 6 429 0 "/api/posts";q=5;w=60
}

func ExampleNewMiddleware_shadow() {
	m := httplimit.NewMiddleware(local.New(local.Config{}),
		httplimit.WithRule("api", ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 2, Window: time.Minute}),
		httplimit.WithKey(httplimit.Header("X-Api-Key")),
		httplimit.WithShadow())
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 5 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Api-Key", "key-1")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	fmt.Printf("%+v\n", m.Stats())
	// Output: {Allowed:2 Denied:0 WouldDeny:3 KeyErrors:0 LimiterErrors:0 DelayExpired:0 Queued:0}
}
