package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/rules"
)

// loginRule is the name of the rule POST /login applies itself.
const loginRule = "login"

// api is a node process's HTTP server: the demo API behind httplimit, the
// login, the JSON decision endpoint and the debug endpoints.
type api struct {
	name  string
	node  clusterNode
	rules *rules.Watcher
	mw    *httplimit.Middleware

	mu       sync.Mutex
	admitted map[string]*atomic.Uint64 // rule name → requests it admitted
}

func newAPI(name string, n clusterNode, w *rules.Watcher) http.Handler {
	a := &api{name: name, node: n, rules: w, admitted: map[string]*atomic.Uint64{}}
	a.mw = httplimit.NewMiddleware(n, httplimit.WithRules(w), httplimit.WithKey(httplimit.Header("X-Api-Key")))

	demo := http.NewServeMux()
	demo.HandleFunc("GET /api/items", a.hello("items"))
	demo.HandleFunc("POST /api/posts", a.hello("posted"))
	demo.HandleFunc("/api/search", a.hello("found"))

	mux := http.NewServeMux()
	mux.Handle("/api/", a.mw.Handler(a.countAdmitted(demo)))
	mux.HandleFunc("POST /login", a.login)
	mux.HandleFunc("GET /v1/allow", a.allow)
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /debug/ringlimit", a.debug)
	mux.Handle("GET /metrics", a.metrics())
	return mux
}

func (a *api) counter(rule string) *atomic.Uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.admitted[rule]
	if !ok {
		c = new(atomic.Uint64)
		a.admitted[rule] = c
	}
	return c
}

// countAdmitted counts, per rule, the requests that got past the middleware:
// every rule that matched them admitted them.
func (a *api) countAdmitted(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, rule := range a.rules.Current().Match(r) {
			a.counter(rule.Name).Add(1)
		}
		next.ServeHTTP(w, r)
	})
}

func (a *api) hello(what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"result": what, "node": a.name})
	}
}

// login limits failed logins per user with check, record and clear: Peek
// refuses early once the user is over the limit, AllowN records the
// attempt, and Reset forgets the failures after a success.
// ?ok=true stands for a correct password.
func (a *api) login(w http.ResponseWriter, r *http.Request) {
	user := r.URL.Query().Get("user")
	rule := a.rules.Current().Lookup(loginRule)
	if user == "" || rule == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "need ?user= (and a login rule)"})
		return
	}
	ctx, key := r.Context(), loginRule+":"+user
	d, err := a.node.Peek(ctx, key, rule.Rule)
	if err != nil {
		writeError(w, err)
		return
	}
	if d.Allowed {
		if d, err = a.node.AllowN(ctx, key, rule.Rule, 1); err != nil {
			writeError(w, err)
			return
		}
	}
	if !d.Allowed {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": "too many attempts", "retry_after_ms": d.RetryAfter.Milliseconds()})
		return
	}
	a.counter(loginRule).Add(1)
	if r.URL.Query().Get("ok") != "true" {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"login": "failed", "attempts_left": d.Remaining})
		return
	}
	if err := a.node.Reset(ctx, key); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"login": "ok", "node": a.name})
}

// decisionJSON is a ringlimit.Decision as /v1/allow returns it.
type decisionJSON struct {
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	DelayMS      int64  `json:"delay_ms"`
	Source       string `json:"source"`
	Node         string `json:"node"`
}

// allow decides ?n= hits (default 1) on ?key= under the rule given by
// ?algorithm= (default fixed_window), ?limit=, ?window= (a Go duration) and
// ?burst=.
func (a *api) allow(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rule, n, err := parseRule(q.Get("algorithm"), q.Get("limit"), q.Get("window"), q.Get("burst"), q.Get("n"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	d, err := a.node.AllowN(r.Context(), q.Get("key"), rule, n)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, decisionJSON{
		Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		RetryAfterMS: d.RetryAfter.Milliseconds(), ResetAfterMS: d.ResetAfter.Milliseconds(),
		DelayMS: d.Delay.Milliseconds(), Source: d.Source.String(), Node: a.name,
	})
}

func parseRule(alg, limit, window, burst, n string) (ringlimit.Rule, int64, error) {
	var rule ringlimit.Rule
	var err error
	if alg == "" {
		alg = "fixed_window"
	}
	if rule.Algorithm, err = ringlimit.ParseAlgorithm(alg); err != nil {
		return rule, 0, err
	}
	if rule.Limit, err = strconv.ParseInt(limit, 10, 64); err != nil {
		return rule, 0, errors.New("limit: want an integer")
	}
	if rule.Window, err = time.ParseDuration(window); err != nil {
		return rule, 0, errors.New("window: want a duration like 1s")
	}
	if burst != "" {
		if rule.Burst, err = strconv.ParseInt(burst, 10, 64); err != nil {
			return rule, 0, errors.New("burst: want an integer")
		}
	}
	hits := int64(1)
	if n != "" {
		if hits, err = strconv.ParseInt(n, 10, 64); err != nil {
			return rule, 0, errors.New("n: want an integer")
		}
	}
	return rule, hits, nil
}

func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "node": a.name})
}

// debugJSON is what /debug/ringlimit returns.
type debugJSON struct {
	Name     string          `json:"name"`
	Gossip   string          `json:"gossip"`
	RPC      string          `json:"rpc"`
	Members  []string        `json:"members"`
	Key      string          `json:"key,omitempty"`
	Owner    string          `json:"owner,omitempty"` // of Key
	Stats    nodeStats       `json:"stats"`
	HTTP     httplimit.Stats `json:"http"`
	Rules    []ruleJSON      `json:"rules"`
	Reloads  uint64          `json:"rule_reloads"`
	BadRules uint64          `json:"rule_errors"`
}

type ruleJSON struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Window    string `json:"window"`
	Key       string `json:"key"`
	Admitted  uint64 `json:"admitted"`
}

func (a *api) debug(w http.ResponseWriter, r *http.Request) {
	d := debugJSON{Name: a.name, Gossip: a.node.GossipAddr(), RPC: a.node.RPCAddr(),
		Members: a.node.Members(), Stats: a.node.Stats(), HTTP: a.mw.Stats(),
		Reloads: a.rules.Reloads(), BadRules: a.rules.Errors()}
	if key := r.URL.Query().Get("key"); key != "" {
		d.Key, d.Owner = key, a.node.Owner(key)
	}
	set := a.rules.Current()
	for i := range set.Len() {
		rule := set.Rule(i)
		key := rule.Key.String()
		if rule.Name == loginRule {
			key = "user"
		}
		d.Rules = append(d.Rules, ruleJSON{Name: rule.Name, Algorithm: rule.Rule.Algorithm.String(),
			Limit: rule.Rule.Limit, Window: rule.Rule.Window.String(), Key: key,
			Admitted: a.counter(rule.Name).Load()})
	}
	slices.SortFunc(d.Rules, func(x, y ruleJSON) int { return cmp.Compare(x.Name, y.Name) })
	writeJSON(w, http.StatusOK, d)
}

// writeError answers a limiter error: bad input is the caller's fault (400);
// anything else (a closed node) is 503.
func writeError(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	if errors.Is(err, ringlimit.ErrInvalidKey) || errors.Is(err, ringlimit.ErrInvalidRule) || errors.Is(err, ringlimit.ErrInvalidHits) {
		code = http.StatusBadRequest
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
