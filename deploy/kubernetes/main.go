// Command kubernetes is the example service of deploy/kubernetes: an HTTP
// API whose requests are limited by rules from a ConfigMap, by a ringlimit
// node embedded in every replica. The replicas find each other through a
// headless Service (-join), keep state in Valkey (-valkey), report readiness
// at /readyz (node.Ready) and, on SIGTERM, report not ready, keep serving
// for -drain while the load balancers take the pod out, then finish the
// requests in flight, hand their keys to the other replicas (node.Close) and
// exit.
//
//	GET /healthz   200 while the process runs (liveness)
//	GET /readyz    200 once the node has joined the cluster, 503 before and from SIGTERM on
//	GET /metrics   Prometheus text: the node's, the middleware's and the rules' ringlimit_ series
//	any other      limited by the rules, then "ok"
//
// With no arguments, mounts or environment (the image's default) it serves
// on :8080 with built-in example rules, no store and no gossip secret, alone
// until another replica joins it. -h lists every flag with its default;
// -version prints the version. The HTTP server closes keep-alive
// connections idle for -idle-timeout and keeps at most -max-conns open. The manifests give the rules file
// (-rules), the store (-valkey; its password from RINGLIMIT_VALKEY_PASSWORD),
// the peers (-join), the proxies whose X-Forwarded-For is believed
// (-trusted-proxies) and the gossip secret (RINGLIMIT_SECRET, hex of 16, 24
// or 32 bytes). The node name comes from -name, else POD_NAME, else the host
// name; the address peers reach it at from -advertise, else POD_IP.
//
// See docs/containers.md to run it by hand, and the manifests beside this
// file.
package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/remote"
)

// Environment variables the example reads.
const (
	SecretEnv   = "RINGLIMIT_SECRET"          // hex gossip and peer secret; empty: none (a warning)
	PasswordEnv = "RINGLIMIT_VALKEY_PASSWORD" // Valkey AUTH password; empty: no AUTH
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Getenv)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage(os.Stdout)
		return
	case err == nil && cfg.version:
		fmt.Println("ringlimit-example", ringlimit.Version)
		return
	case err == nil:
		err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ringlimit-example:", err)
		if errors.Is(err, errBadFlag) {
			fmt.Fprintln(os.Stderr, "ringlimit-example -h lists the flags")
		}
		os.Exit(1)
	}
}

// errBadFlag is wrapped by every error of parseFlags but -h's.
var errBadFlag = errors.New("bad flag")

// config is what the flags say.
type config struct {
	name      string
	http      string // HTTP listen host:port
	gossip    string // gossip listen host:port
	rpc       string // peer RPC listen host:port
	advertise string // IP the peers reach this replica at; "" for the bound one
	join      []string
	valkey    []string
	password  string // Valkey AUTH
	rules     string // "" for the built-in rules
	trusted   []netip.Prefix
	secret    []byte
	drain     time.Duration // SIGTERM: how long /readyz says 503 before the server stops
	grace     time.Duration // then: how long to wait for requests in flight
	idle      time.Duration // how long a keep-alive connection may stay idle
	maxConns  int           // HTTP connections open at once; more are closed at accept
	version   bool          // print the version and exit
}

// flags is the example's flag set, writing into c and the lists' raw
// values.
func flags(c *config, join, valkey, trusted *string) *flag.FlagSet {
	fs := flag.NewFlagSet("ringlimit-example", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.name, "name", "", "node name, unique in the cluster (default $POD_NAME, else the host name)")
	fs.StringVar(&c.http, "http", ":8080", "HTTP listen address (API, probes and /metrics)")
	fs.StringVar(&c.gossip, "gossip", ":7946", "gossip listen address (TCP and UDP)")
	fs.StringVar(&c.rpc, "rpc", ":7947", "peer RPC listen address")
	fs.StringVar(&c.advertise, "advertise", "", "IP address peers reach this replica at (default $POD_IP)")
	fs.StringVar(join, "join", "", "comma-separated gossip addresses or names to join (the headless Service, host:port)")
	fs.StringVar(valkey, "valkey", "", "comma-separated Valkey addresses (a cluster's seeds are enough); empty: no store (password from $"+PasswordEnv+")")
	fs.StringVar(&c.rules, "rules", "", "rules file (reloaded when it changes); empty: the built-in example rules")
	fs.StringVar(trusted, "trusted-proxies", "", "comma-separated networks (CIDR) of the proxies whose X-Forwarded-For is believed; empty: none")
	fs.DurationVar(&c.drain, "drain", 2*time.Second, "on SIGTERM, how long /readyz answers 503 while requests are still served")
	fs.DurationVar(&c.grace, "shutdown-timeout", 10*time.Second, "then, how long to wait for requests in flight")
	fs.DurationVar(&c.idle, "idle-timeout", 75*time.Second, "how long an HTTP keep-alive connection may stay idle before it is closed (longer than the ingress's upstream keep-alive, 60s in ingress-nginx, so the proxy closes first)")
	fs.IntVar(&c.maxConns, "max-conns", 4096, "HTTP connections open at once, idle keep-alives included (about 20 KiB each); connections over it are closed at once")
	fs.BoolVar(&c.version, "version", false, "print the version and exit")
	return fs
}

// usage writes the help: what the program is, then every flag with its
// default.
func usage(w io.Writer) {
	var c config
	var s string
	fs := flags(&c, &s, &s, &s)
	fs.SetOutput(w)
	fmt.Fprintf(w, `Usage: ringlimit-example [flags]

The example service of ringlimit %s: an HTTP API limited by rules, by a
ringlimit node embedded in each replica. With no flags it serves on :8080
with built-in example rules, no store and no gossip secret.

Environment: POD_NAME (default -name), POD_IP (default -advertise),
%s (hex of 16, 24 or 32 bytes; empty: no encryption, no peer
authentication), %s (the store's AUTH password).

Flags:
`, ringlimit.Version, SecretEnv, PasswordEnv)
	fs.PrintDefaults()
}

// parseFlags reads args; getenv supplies POD_NAME, POD_IP and the secrets.
// -h returns flag.ErrHelp; any other error wraps errBadFlag.
func parseFlags(args []string, getenv func(string) string) (config, error) {
	var c config
	var join, valkey, trusted string
	fs := flags(&c, &join, &valkey, &trusted)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return c, err
	} else if err != nil {
		return c, fmt.Errorf("%w: %w", errBadFlag, err)
	}
	if c.version {
		return c, nil
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("%w: unexpected arguments %q", errBadFlag, fs.Args())
	}
	for _, a := range []string{c.http, c.gossip, c.rpc} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return c, fmt.Errorf("%w: %w", errBadFlag, err)
		}
	}
	if c.drain < 0 || c.grace < 0 || c.idle <= 0 {
		return c, fmt.Errorf("%w: -drain %v, -shutdown-timeout %v, -idle-timeout %v: want -idle-timeout above 0, the others not negative", errBadFlag, c.drain, c.grace, c.idle)
	}
	if c.maxConns < 1 {
		return c, fmt.Errorf("%w: -max-conns %d: want at least 1", errBadFlag, c.maxConns)
	}
	if c.name == "" {
		c.name = getenv("POD_NAME")
	}
	if c.name == "" {
		c.name, _ = os.Hostname()
	}
	if c.advertise == "" {
		c.advertise = getenv("POD_IP")
	}
	if c.advertise != "" && net.ParseIP(c.advertise) == nil {
		return c, fmt.Errorf("%w: -advertise %q is not an IP address", errBadFlag, c.advertise)
	}
	c.join, c.valkey = list(join), list(valkey)
	for _, s := range list(trusted) {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return c, fmt.Errorf("%w: -trusted-proxies: %w", errBadFlag, err)
		}
		c.trusted = append(c.trusted, p.Masked())
	}
	secret, err := hex.DecodeString(strings.TrimSpace(getenv(SecretEnv)))
	if err != nil {
		return c, fmt.Errorf("%w: %s: %w", errBadFlag, SecretEnv, err)
	}
	c.secret = secret
	c.password = getenv(PasswordEnv)
	return c, nil
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// nodeConfig is the node's Config for c.
func (c config) nodeConfig(log *slog.Logger) node.Config {
	nc := node.Config{
		Name:        c.name,
		GossipAddr:  bindAll(c.gossip),
		RPCAddr:     bindAll(c.rpc),
		Join:        c.join,
		ValkeyAddrs: c.valkey,
		SecretKey:   c.secret,
		Logger:      log,
	}
	if c.password != "" && len(c.valkey) > 0 {
		nc.ValkeyOptions = &remote.Options{Addrs: c.valkey, Password: c.password}
	}
	if c.advertise != "" {
		nc.GossipAdvertise = net.JoinHostPort(c.advertise, port(c.gossip))
		nc.RPCAdvertise = net.JoinHostPort(c.advertise, port(c.rpc))
	}
	return nc
}

// bindAll turns ":7946" into "0.0.0.0:7946" (the node wants an IP).
func bindAll(addr string) string {
	if h, p, _ := net.SplitHostPort(addr); h == "" {
		return net.JoinHostPort("0.0.0.0", p)
	}
	return addr
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
