package chaoskit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/node"
)

// Stats mirrors chaosnode's /stats.
type Stats struct {
	Name       string     `json:"name"`
	Members    []string   `json:"members"`
	Goroutines int        `json:"goroutines"`
	FDs        int        `json:"fds"`
	Node       node.Stats `json:"node"`
}

// Node is one chaosnode as the harness reaches it: its name, its HTTP
// address (which may change when the node comes back elsewhere), its own
// HTTP client, and the Switch that says whether the load calls it. It is
// a Target. Its methods are safe for simultaneous use by multiple
// goroutines.
type Node struct {
	Switch
	name   string
	addr   atomic.Pointer[string] // host:port of its HTTP endpoint
	tr     *http.Transport
	client *http.Client
}

var _ Target = (*Node)(nil)

// NewNode returns a node named name, off, with no address yet (SetAddr),
// whose client keeps up to maxIdle idle connections (if zero, net/http's
// default of 2).
func NewNode(name string, maxIdle int) *Node {
	n := &Node{name: name}
	n.addr.Store(new(string))
	n.tr = &http.Transport{MaxIdleConnsPerHost: maxIdle, DisableCompression: true}
	n.client = &http.Client{Transport: n.tr, Timeout: 3 * time.Second}
	return n
}

// Name returns the node's name.
func (n *Node) Name() string { return n.name }

// SetAddr sets the host:port of the node's HTTP endpoint.
func (n *Node) SetAddr(hostport string) { n.addr.Store(&hostport) }

// URL returns the URL of path on the node's HTTP endpoint.
func (n *Node) URL(path string) string { return "http://" + *n.addr.Load() + path }

// Down takes the node out of the load before a fault (Off) and closes its
// idle connections: one the client dialled but never used would hold up
// the node's graceful HTTP shutdown.
func (n *Node) Down() {
	n.Off()
	n.tr.CloseIdleConnections()
}

// CloseIdleConnections closes the client's idle connections.
func (n *Node) CloseIdleConnections() { n.tr.CloseIdleConnections() }

// Allow calls the node's /v1/allow for one call of key under r. An answer
// other than 200 OK is an error.
func (n *Node) Allow(ctx context.Context, key string, r Rule) (Decision, error) {
	u := n.URL("/v1/allow?key=" + url.QueryEscape(key) +
		"&algorithm=" + r.Algorithm + "&limit=" + fmt.Sprint(r.Limit) + "&window=" + r.Window.String())
	var d Decision
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return d, err
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return d, err
	}
	err = json.NewDecoder(resp.Body).Decode(&d)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, d.Error)
	}
	return d, err
}

// Stats asks the node's /stats, waiting up to a second.
func (n *Node) Stats() (Stats, error) {
	var s Stats
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL("/stats"), nil)
	if err != nil {
		return s, err
	}
	resp, err := n.client.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("%s /stats: %s", n.name, resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// Healthy asks the node's /healthz once: nil if it answered 200 OK.
func (n *Node) Healthy() error {
	resp, err := n.client.Get(n.URL("/healthz"))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s /healthz: %s", n.name, resp.Status)
	}
	return nil
}

// Post posts an empty body to path on the node: nil if it answered 200 OK.
func (n *Node) Post(path string) error {
	resp, err := n.client.Post(n.URL(path), "text/plain", nil)
	if err != nil {
		return fmt.Errorf("%s POST %s: %w", n.name, path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s POST %s: %s", n.name, path, resp.Status)
	}
	return nil
}
