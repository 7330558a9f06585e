package main

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// dashPage is the whole dashboard: HTML, style and script in one response,
// drawing with inline SVG, fetching nothing but ./state and ./control.
//
//go:embed dash.html
var dashPage []byte

// Bounds of the dashboard's server.
const (
	dashMaxConns   = 64   // connections served at once; more wait in the backlog
	dashMaxBody    = 1024 // bytes of a control request's body
	dashQueue      = 4    // control commands waiting for the run loop
	dashCmdTimeout = 30 * time.Second
)

// dashboard serves the web view of the demo: the page, the state the run
// loop publishes after each poll of the nodes (once a second) and after each
// command, and the controls, which it hands to the run loop. The browser
// never talks to the nodes.
type dashboard struct {
	nodes int
	state atomic.Pointer[[]byte]
	cmds  chan dashCmd  // to the run loop
	done  chan struct{} // closed when the run loop takes no more commands
	once  sync.Once
}

// dashCmd is a control the run loop carries out as if typed on stdin.
type dashCmd struct {
	line string // "k 2", "r 2", "s", "S" or "c"
	desc string // for the event log
	from string // the client's address
	done chan struct{}
}

func newDashboard(nodes int) *dashboard {
	d := &dashboard{nodes: nodes, cmds: make(chan dashCmd, dashQueue), done: make(chan struct{})}
	empty := []byte("{}")
	d.state.Store(&empty)
	return d
}

// publish makes b the state that GET /state returns.
func (d *dashboard) publish(b []byte) { d.state.Store(&b) }

// stop tells waiting control requests that no command will be carried out
// any more. It is idempotent.
func (d *dashboard) stop() { d.once.Do(func() { close(d.done) }) }

// handler serves the dashboard's routes to requests whose Host names it
// (hostAllowed); any other gets 403 whatever its path.
func (d *dashboard) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", d.page)
	mux.HandleFunc("GET /state", d.serveState)
	mux.HandleFunc("POST /control", d.control)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r) {
			securityHeaders(w.Header())
			writeJSON(w, http.StatusForbidden, map[string]string{"error": errForeignView.Error()})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether r's Host names the dashboard by a loopback name
// (as the controls require) or by the IP address of the listener the request
// came in on (a viewer on another machine, when -dashboard binds a wider
// address). A DNS-rebinding page sends its own host name, so it is refused:
// /state shows the store's address and the nodes' ports.
func hostAllowed(r *http.Request) bool {
	if loopbackName(r.Host) {
		return true
	}
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	ip := net.ParseIP(host)
	local, _ := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	return ip != nil && local != nil && !ip.IsUnspecified() && ip.Equal(local.IP)
}

// securityHeaders forbid the page to load anything from anywhere but its
// own origin, and other sites to frame it.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
}

func (d *dashboard) page(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(dashPage)
}

// serveState answers {"controls": whether this client may use them,
// "state": the last published dashState}.
func (d *dashboard) serveState(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"controls":%t,"state":%s}`, controlsAllowed(r) == nil, *d.state.Load())
}

var (
	errNotLoopback = errors.New("the controls answer only loopback clients")
	errForeignHost = errors.New("the controls answer only requests for a loopback host name")
	errCrossOrigin = errors.New("the controls answer only the dashboard's own page")
	errForeignView = errors.New("the dashboard answers only requests for a loopback host name or the address it listens on")
)

// controlsAllowed refuses a request from another machine, one for a host
// name that is not a loopback one (a DNS-rebinding page), and one a page of
// another origin sent.
func controlsAllowed(r *http.Request) error {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return errNotLoopback
	}
	if !loopbackName(r.Host) {
		return errForeignHost
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
		return errCrossOrigin
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return errCrossOrigin
	}
	return nil
}

// loopbackName reports whether hostport names this machine by a loopback
// address or "localhost".
func loopbackName(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// controlRequest is the body of POST /control.
type controlRequest struct {
	Action string `json:"action"` // kill, restart, store-stop, store-start, chaos
	Node   int    `json:"node"`   // 1-based, for kill and restart
}

var errBadControl = errors.New("bad control request")

// command checks req and returns the stdin command it stands for.
func (d *dashboard) command(req controlRequest) (line, desc string, err error) {
	node := func(cmd, verb string) (string, string, error) {
		if req.Node < 1 || req.Node > d.nodes {
			return "", "", fmt.Errorf("%w: %s: node %d, want 1 to %d", errBadControl, req.Action, req.Node, d.nodes)
		}
		return fmt.Sprintf("%s %d", cmd, req.Node), fmt.Sprintf("%s n%d", verb, req.Node), nil
	}
	if req.Node != 0 && req.Action != "kill" && req.Action != "restart" {
		return "", "", fmt.Errorf("%w: %s takes no node", errBadControl, req.Action)
	}
	switch req.Action {
	case "kill":
		return node("k", "kill -9")
	case "restart":
		return node("r", "restart")
	case "store-stop":
		return "s", "stop the store", nil
	case "store-start":
		return "S", "start the store", nil
	case "chaos":
		return "c", "run the scripted chaos", nil
	}
	return "", "", fmt.Errorf("%w: unknown action %q", errBadControl, req.Action)
}

// control takes a command from a loopback client, hands it to the run loop
// and answers once it was carried out.
func (d *dashboard) control(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if err := controlsAllowed(r); err != nil {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": "want Content-Type: application/json"})
		return
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, dashMaxBody))
	dec.DisallowUnknownFields()
	var req controlRequest
	err := dec.Decode(&req)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		code := http.StatusBadRequest
		if tooBig := new(http.MaxBytesError); errors.As(err, &tooBig) {
			code = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, code, map[string]string{"error": fmt.Errorf("%w: %w", errBadControl, err).Error()})
		return
	}
	line, desc, err := d.command(req)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	cmd := dashCmd{line: line, desc: desc, from: r.RemoteAddr, done: make(chan struct{})}
	select {
	case d.cmds <- cmd:
	case <-d.done:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the demo is stopping"})
		return
	default:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "busy: too many commands waiting"})
		return
	}
	t := time.NewTimer(dashCmdTimeout)
	defer t.Stop()
	select {
	case <-cmd.done:
		writeJSON(w, http.StatusOK, map[string]string{"done": desc})
	case <-d.done:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "the demo is stopping"})
	case <-t.C:
		writeJSON(w, http.StatusAccepted, map[string]string{"queued": desc})
	case <-r.Context().Done():
	}
}

// limitListener accepts at most n connections at a time; the next waits in
// Accept until one closes.
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.sem })}, nil
}

type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// dashURL is the address to print for a listener bound to addr: a wildcard
// bind is reached at 127.0.0.1.
func dashURL(addr net.Addr) string {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}
