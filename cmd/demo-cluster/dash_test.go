package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// controlReq builds a POST /control as the dashboard's own page sends it,
// from a loopback client, and lets mod change it.
func controlReq(body string, mod func(*http.Request)) *http.Request {
	r := httptest.NewRequest("POST", "http://127.0.0.1:8080/control", strings.NewReader(body))
	r.RemoteAddr = "127.0.0.1:50000"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Origin", "http://127.0.0.1:8080")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	if mod != nil {
		mod(r)
	}
	return r
}

// runLoop stands in for the demo's run loop: it carries out every command by
// recording its line, until the test ends.
func runLoop(t *testing.T, d *dashboard) <-chan string {
	lines := make(chan string, 100)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case c := <-d.cmds:
				lines <- c.line
				close(c.done)
			case <-quit:
				return
			}
		}
	}()
	t.Cleanup(func() { close(quit); <-done; d.stop() })
	return lines
}

func serve(d *dashboard, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	d.handler().ServeHTTP(w, r)
	return w
}

func TestControlCarriesOutCommands(t *testing.T) {
	d := newDashboard(3)
	lines := runLoop(t, d)
	for body, want := range map[string]string{
		`{"action":"kill","node":2}`:    "k 2",
		`{"action":"restart","node":3}`: "r 3",
		`{"action":"store-stop"}`:       "s",
		`{"action":"store-start"}`:      "S",
		`{"action":"chaos"}`:            "c",
	} {
		w := serve(d, controlReq(body, nil))
		if w.Code != http.StatusOK {
			t.Errorf("%s: %d %s", body, w.Code, w.Body)
			continue
		}
		if got := <-lines; got != want {
			t.Errorf("%s: command %q, want %q", body, got, want)
		}
	}
}

// Only loopback clients may use the controls, whatever the dashboard binds
// to; and not through a page of another origin or a host name that is not a
// loopback one (DNS rebinding).
func TestControlRefusesOthers(t *testing.T) {
	d := newDashboard(3)
	lines := runLoop(t, d)
	for name, mod := range map[string]func(*http.Request){
		"another machine":     func(r *http.Request) { r.RemoteAddr = "192.0.2.7:40000" },
		"another machine, v6": func(r *http.Request) { r.RemoteAddr = "[2001:db8::7]:40000" },
		"no address":          func(r *http.Request) { r.RemoteAddr = "" },
		"LAN address bound":   func(r *http.Request) { r.RemoteAddr = "10.1.2.3:40000"; r.Host = "10.1.2.2:8080" },
		"rebinding host name": func(r *http.Request) {
			r.Host = "evil.example:8080"
			r.Header.Set("Origin", "http://evil.example:8080")
		},
		"other origin":         func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") },
		"cross-site fetch":     func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") },
		"same-site other port": func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "same-site") },
	} {
		w := serve(d, controlReq(`{"action":"kill","node":1}`, mod))
		if w.Code != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", name, w.Code, w.Body)
		}
	}
	// The same request from this machine is carried out: the refusals
	// above were for who asked, not for what.
	if w := serve(d, controlReq(`{"action":"kill","node":1}`, func(r *http.Request) { r.RemoteAddr = "[::1]:40000" })); w.Code != http.StatusOK {
		t.Fatalf("from ::1: %d %s", w.Code, w.Body)
	}
	if got := <-lines; got != "k 1" {
		t.Errorf("command %q, want k 1", got)
	}
	select {
	case l := <-lines:
		t.Errorf("a refused request was carried out: %q", l)
	default:
	}
}

func TestControlValidates(t *testing.T) {
	d := newDashboard(3)
	lines := runLoop(t, d)
	for _, c := range []struct {
		name string
		req  *http.Request
		code int
	}{
		{"GET", func() *http.Request { r := controlReq("", nil); r.Method = "GET"; return r }(), http.StatusMethodNotAllowed},
		{"PUT", func() *http.Request { r := controlReq(`{"action":"chaos"}`, nil); r.Method = "PUT"; return r }(), http.StatusMethodNotAllowed},
		{"form body", controlReq("action=chaos", func(r *http.Request) { r.Header.Set("Content-Type", "application/x-www-form-urlencoded") }), http.StatusUnsupportedMediaType},
		{"no type", controlReq(`{"action":"chaos"}`, func(r *http.Request) { r.Header.Del("Content-Type") }), http.StatusUnsupportedMediaType},
		{"too big", controlReq(`{"action":"chaos","node":0`+strings.Repeat(" ", dashMaxBody)+`}`, nil), http.StatusRequestEntityTooLarge},
		{"not JSON", controlReq(`kill 2`, nil), http.StatusBadRequest},
		{"empty", controlReq(``, nil), http.StatusBadRequest},
		{"two values", controlReq(`{"action":"chaos"}{"action":"chaos"}`, nil), http.StatusBadRequest},
		{"unknown field", controlReq(`{"action":"kill","node":1,"signal":15}`, nil), http.StatusBadRequest},
		{"unknown action", controlReq(`{"action":"quit"}`, nil), http.StatusBadRequest},
		{"node 0", controlReq(`{"action":"kill","node":0}`, nil), http.StatusBadRequest},
		{"node 4 of 3", controlReq(`{"action":"restart","node":4}`, nil), http.StatusBadRequest},
		{"node -1", controlReq(`{"action":"kill","node":-1}`, nil), http.StatusBadRequest},
		{"node as text", controlReq(`{"action":"kill","node":"1"}`, nil), http.StatusBadRequest},
		{"huge node", controlReq(`{"action":"kill","node":1e30}`, nil), http.StatusBadRequest},
		{"node for the store", controlReq(`{"action":"store-stop","node":1}`, nil), http.StatusBadRequest},
	} {
		w := serve(d, c.req)
		if w.Code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, w.Code, w.Body, c.code)
		}
	}
	select {
	case l := <-lines:
		t.Errorf("a bad request was carried out: %q", l)
	default:
	}
	if w := serve(d, controlReq(`{"action":"kill","node":3}`, nil)); w.Code != http.StatusOK {
		t.Errorf("a good request after them: %d %s", w.Code, w.Body)
	}
}

// The queue of commands is bounded: past it, a request is refused at once;
// and once the run loop stops, waiting requests are answered.
func TestControlQueueBound(t *testing.T) {
	d := newDashboard(3)
	for range dashQueue {
		d.cmds <- dashCmd{line: "s", done: make(chan struct{})}
	}
	if w := serve(d, controlReq(`{"action":"chaos"}`, nil)); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "busy") {
		t.Errorf("past the queue: %d %s, want 503 busy", w.Code, w.Body)
	}
	<-d.cmds // room for one, which nobody will carry out
	answered := make(chan int)
	go func() { answered <- serve(d, controlReq(`{"action":"chaos"}`, nil)).Code }()
	for deadline := time.Now().Add(5 * time.Second); len(d.cmds) < dashQueue; { // queued
		if time.Now().After(deadline) {
			t.Fatal("the request was not queued")
		}
		time.Sleep(time.Millisecond)
	}
	d.stop()
	if code := <-answered; code != http.StatusServiceUnavailable {
		t.Errorf("waiting when the demo stopped: %d, want 503", code)
	}
	d.stop() // idempotent
}

func TestDashboardPage(t *testing.T) {
	d := newDashboard(3)
	r := httptest.NewRequest("GET", "http://127.0.0.1:8080/", nil)
	w := serve(d, r)
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", w.Code, w.Header())
	}
	page := w.Body.String()
	if len(page) >= 100<<10 {
		t.Errorf("page is %d bytes, want under 100 KiB", len(page))
	}
	if !strings.Contains(w.Header().Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("no restrictive CSP: %q", w.Header().Get("Content-Security-Policy"))
	}
	// Nothing fetched from elsewhere: no external script, style, font or
	// image; the only URL is SVG's namespace, which is a name.
	for _, re := range []string{`<script[^>]+src`, `<link`, `@import`, `url\(`, `<img`, `<iframe`} {
		if regexp.MustCompile(re).MatchString(page) {
			t.Errorf("page contains %s", re)
		}
	}
	for _, u := range regexp.MustCompile(`https?://[^"' )]+`).FindAllString(page, -1) {
		if u != "http://www.w3.org/2000/svg" {
			t.Errorf("page names %s", u)
		}
	}
	for _, want := range []string{"only requests from this machine", `fetch("state"`, `fetch("control"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if w := serve(d, httptest.NewRequest("GET", "http://127.0.0.1:8080/nothing", nil)); w.Code != http.StatusNotFound {
		t.Errorf("GET /nothing: %d", w.Code)
	}
}

func TestDashboardState(t *testing.T) {
	d := newDashboard(3)
	d.publish([]byte(`{"up_s":1}`))
	for remote, controls := range map[string]bool{"127.0.0.1:1": true, "192.0.2.1:1": false} {
		r := httptest.NewRequest("GET", "http://127.0.0.1:8080/state", nil)
		r.RemoteAddr = remote
		w := serve(d, r)
		var got struct {
			Controls bool
			State    struct {
				UpS float64 `json:"up_s"`
			}
		}
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v: %s", remote, err, w.Body)
		}
		if got.Controls != controls || got.State.UpS != 1 {
			t.Errorf("from %s: %+v, want controls %t and the published state", remote, got, controls)
		}
	}
}

// The listener serves at most n connections at once; the next is accepted
// when one closes.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(inner, 2)
	defer l.Close()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	var conns []net.Conn
	for range 2 {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	third := make(chan net.Conn)
	go func() {
		c, err := l.Accept()
		if err != nil {
			c = nil
		}
		third <- c
	}()
	select {
	case <-third:
		t.Fatal("a third connection was accepted past the limit of 2")
	case <-time.After(100 * time.Millisecond):
	}
	conns[0].Close()
	conns[0].Close() // a second Close releases nothing more
	c := <-third
	if c == nil {
		t.Fatal("no third connection after one closed")
	}
	c.Close()
	conns[1].Close()
	if len(l.sem) != 0 {
		t.Errorf("%d slots held after every connection closed", len(l.sem))
	}
}

func TestDashURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080": "http://127.0.0.1:8080/",
		"0.0.0.0:8080":   "http://127.0.0.1:8080/",
		"[::]:8080":      "http://127.0.0.1:8080/",
		"[::1]:8080":     "http://[::1]:8080/",
		"10.0.0.2:80":    "http://10.0.0.2:80/",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := dashURL(a); got != want {
			t.Errorf("dashURL(%s) = %s, want %s", addr, got, want)
		}
	}
}

// FuzzControl: whatever the body, the handler answers 200 with a valid
// command, or refuses it, and never carries out anything else.
func FuzzControl(f *testing.F) {
	for _, s := range []string{`{"action":"kill","node":2}`, `{"action":"chaos"}`, `{"action":"kill","node":99}`, `{}`, `[`, `{"node":1e400}`} {
		f.Add([]byte(s))
	}
	valid := regexp.MustCompile(`^([kr] [123]|s|S|c)$`)
	f.Fuzz(func(t *testing.T, body []byte) {
		d := newDashboard(3)
		lines := runLoop(t, d)
		w := serve(d, controlReq(string(body), nil))
		switch w.Code {
		case http.StatusOK:
			if l := <-lines; !valid.MatchString(l) {
				t.Fatalf("body %q carried out %q", body, l)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if len(lines) != 0 {
				t.Fatalf("body %q refused, yet carried out", body)
			}
		default:
			t.Fatalf("body %q: %d %s", body, w.Code, w.Body)
		}
		if !json.Valid(bytes.TrimSpace(w.Body.Bytes())) {
			t.Fatalf("answer is not JSON: %s", w.Body)
		}
	})
}

// The c command and the chaos button spread the script over chaosSpan from
// the moment they were given.
func TestSchedule(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	got := schedule(chaosScript(3), now, 30*time.Second)
	want := []timedStep{{now.Add(6 * time.Second), "k 2"}, {now.Add(12 * time.Second), "r 2"},
		{now.Add(18 * time.Second), "s"}, {now.Add(24 * time.Second), "S"}}
	if !slices.Equal(got, want) {
		t.Errorf("schedule: %v, want %v", got, want)
	}
	if d := describe(got, now); d != `"k 2" in 6s, "r 2" in 12s, "s" in 18s, "S" in 24s` {
		t.Errorf("describe: %s", d)
	}
}

// Every route of the dashboard, not only the controls, refuses a request for
// a host name that is not a loopback one: a DNS-rebinding page (evil.example
// resolved to 127.0.0.1) must not read the store's address and the nodes'
// ports from /state, nor load the page. A viewer on another machine that
// names the dashboard by the address it listens on is still served.
func TestDashboardRefusesForeignHost(t *testing.T) {
	d := newDashboard(3)
	d.publish([]byte(`{"store":{"addr":"127.0.0.1:7777"}}`))
	listening := func(addr string) func(*http.Request) *http.Request {
		return func(r *http.Request) *http.Request {
			a, err := net.ResolveTCPAddr("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, a))
		}
	}
	for _, c := range []struct {
		name, host, remote string
		on                 func(*http.Request) *http.Request // the listener's address
		ok                 bool
	}{
		{"loopback address", "127.0.0.1:8080", "127.0.0.1:1", listening("127.0.0.1:8080"), true},
		{"localhost", "localhost:8080", "127.0.0.1:1", listening("127.0.0.1:8080"), true},
		{"v6 loopback", "[::1]:8080", "[::1]:1", listening("[::1]:8080"), true},
		{"the LAN address it listens on", "10.1.2.2:8080", "10.1.2.3:1", listening("10.1.2.2:8080"), true},
		{"rebinding name", "evil.example:8080", "127.0.0.1:1", listening("127.0.0.1:8080"), false},
		{"rebinding name, wide bind", "evil.example:8080", "127.0.0.1:1", listening("0.0.0.0:8080"), false},
		{"rebinding name, no port", "evil.example", "127.0.0.1:1", listening("127.0.0.1:8080"), false},
		{"localhost subdomain", "localhost.evil.example:8080", "127.0.0.1:1", listening("127.0.0.1:8080"), false},
		{"another address than the listener's", "10.9.9.9:8080", "10.1.2.3:1", listening("10.1.2.2:8080"), false},
		{"an address, unknown listener", "10.1.2.2:8080", "10.1.2.3:1", func(r *http.Request) *http.Request { return r }, false},
		{"no host", "", "127.0.0.1:1", listening("127.0.0.1:8080"), false},
	} {
		for _, path := range []string{"/", "/state", "/nothing"} {
			r := httptest.NewRequest("GET", "http://127.0.0.1:8080"+path, nil)
			r.Host, r.RemoteAddr = c.host, c.remote
			w := serve(d, c.on(r))
			refused := w.Code == http.StatusForbidden
			if c.ok == refused {
				t.Errorf("%s: GET %s for Host %q: %d, want refused %t", c.name, path, c.host, w.Code, !c.ok)
			}
			if refused && strings.Contains(w.Body.String(), "7777") {
				t.Errorf("%s: GET %s: the refusal shows the state: %s", c.name, path, w.Body)
			}
		}
	}
	// The controls are refused to a rebinding name as before.
	r := controlReq(`{"action":"chaos"}`, func(r *http.Request) { r.Host = "evil.example:8080"; r.Header.Del("Origin") })
	if w := serve(d, r); w.Code != http.StatusForbidden {
		t.Errorf("POST /control for evil.example: %d", w.Code)
	}
}

// Through a real listener: the server puts the connection's local address
// in the request's context, and a request naming the dashboard by it is
// served while one naming another host is refused.
func TestDashboardHostRealListener(t *testing.T) {
	d := newDashboard(3)
	d.publish([]byte(`{"up_s":1}`))
	srv := httptest.NewServer(d.handler())
	defer srv.Close()
	for host, want := range map[string]int{
		srv.Listener.Addr().String(): http.StatusOK,
		"localhost":                  http.StatusOK,
		"evil.example":               http.StatusForbidden,
		"127.0.0.2":                  http.StatusOK, // loopback: this machine
		"192.0.2.1":                  http.StatusForbidden,
	} {
		req, err := http.NewRequest("GET", srv.URL+"/state", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}

	// Bound to this machine's LAN address, as -dashboard 0.0.0.0:PORT would
	// be reached from another machine: named by it, the view is served.
	var lan net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			lan = n.IP
			break
		}
	}
	if lan == nil {
		t.Log("no non-loopback IPv4 address: the LAN case is not tried")
		return
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(lan.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	wide := &httptest.Server{Listener: ln, Config: &http.Server{Handler: d.handler()}}
	wide.Start()
	defer wide.Close()
	for host, want := range map[string]int{ln.Addr().String(): http.StatusOK, "evil.example": http.StatusForbidden, "192.0.2.1": http.StatusForbidden} {
		req, _ := http.NewRequest("GET", wide.URL+"/state", nil)
		req.Host = host
		resp, err := wide.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("on %s, Host %s: %d, want %d", ln.Addr(), host, resp.StatusCode, want)
		}
	}
}

// The nodes' colours on the dashboard are not the sources' (local, peer,
// store, fallback) nor the dead grey, nor near one: n1 in the peer blue
// read as "peer" in the nodes' charts.
func TestNodeColoursAreNotSources(t *testing.T) {
	page := string(dashPage)
	rgb := func(hex string) [3]float64 {
		var c [3]float64
		for i := range c {
			v, err := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
			if err != nil {
				t.Fatalf("colour %q: %v", hex, err)
			}
			c[i] = float64(v)
		}
		return c
	}
	sources := map[string][3]float64{}
	for _, name := range []string{"local", "peer", "store", "fallback", "dead"} {
		m := regexp.MustCompile(`--` + name + `: (#[0-9a-fA-F]{6});`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no --%s colour in the page", name)
		}
		sources[name] = rgb(m[1])
	}
	m := regexp.MustCompile(`const COLORS = \[([^\]]*)\]`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no node colours (COLORS) in the page")
	}
	nodes := regexp.MustCompile(`#[0-9a-fA-F]{6}`).FindAllString(m[1], -1)
	if len(nodes) < 5 {
		t.Fatalf("%d node colours, want at least 5 (the demo's -nodes)", len(nodes))
	}
	for i, hex := range nodes {
		c := rgb(hex)
		for name, s := range sources {
			// 60 in RGB space: the closest pair here (teal and the peer
			// blue) is 68 apart, and looks apart.
			if d := math.Sqrt((c[0]-s[0])*(c[0]-s[0]) + (c[1]-s[1])*(c[1]-s[1]) + (c[2]-s[2])*(c[2]-s[2])); d < 60 {
				t.Errorf("n%d's colour %s is %.0f from the %s colour", i+1, hex, d, name)
			}
		}
	}
}
