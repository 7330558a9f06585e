package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// options are what the flags say.
type options struct {
	name       string
	gossip     string
	peer       string
	advertise  string
	join       []string
	secretFile string
	secret     []byte
	store      []string
	config     string
	grpc       string
	http       string
	merge      bool
	version    bool
	timing     string
	reload     time.Duration
}

// errHelp is parseFlags' answer to -h: the usage went to out.
var errHelp = flag.ErrHelp

// parseFlags reads args; getenv supplies POD_NAME and POD_IP. -h writes the
// usage, every flag with its default, to out.
func parseFlags(args []string, getenv func(string) string, out io.Writer) (options, error) {
	fs := flag.NewFlagSet("ringlimitd", flag.ContinueOnError)
	fs.SetOutput(out)
	var o options
	var join, store string
	fs.StringVar(&o.name, "name", "", "node name, unique in the cluster (default $POD_NAME, else the host name)")
	fs.StringVar(&o.gossip, "gossip", ":7946", "gossip listen address, TCP and UDP (port 0 picks one)")
	fs.StringVar(&o.peer, "peer", ":7947", "peer RPC listen address (port 0 picks one)")
	fs.StringVar(&o.advertise, "advertise", "", "IP address the other members reach this one at (default $POD_IP, else the bound address)")
	fs.StringVar(&join, "join", "", "comma-separated gossip addresses HOST:PORT to join; DNS names are resolved again while members are missing")
	fs.StringVar(&o.secretFile, "secret-file", "", "file holding the cluster secret: 64 hex characters (32 bytes), surrounding whitespace ignored; empty: no gossip encryption or peer authentication (a warning)")
	fs.StringVar(&store, "store", "", "comma-separated Valkey/Redis addresses of the central store (optional)")
	fs.StringVar(&o.config, "config", "", "envoyproxy/ratelimit YAML config: a file, or a directory of files (one domain each); empty: no domains")
	fs.StringVar(&o.grpc, "grpc", ":8081", "gRPC listen address: envoy.service.ratelimit.v3.RateLimitService")
	fs.StringVar(&o.http, "http", ":8080", "HTTP listen address: POST /json, /healthz, /readyz, /metrics")
	fs.BoolVar(&o.merge, "merge-domains", false, "merge a domain found in several files (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG) instead of refusing the config")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.StringVar(&o.timing, "gossip-timing", "lan", "gossip timings: lan, or fast (tests and local clusters)")
	fs.DurationVar(&o.reload, "reload", time.Second, "how often the config is checked for changes")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.version {
		return o, nil
	}
	for _, a := range []string{o.gossip, o.peer, o.grpc, o.http} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return o, err
		}
	}
	if o.timing != "lan" && o.timing != "fast" {
		return o, fmt.Errorf("-gossip-timing %q: want lan or fast", o.timing)
	}
	if o.reload <= 0 || o.reload > 5*time.Second {
		return o, fmt.Errorf("-reload %v: want more than 0 and at most 5s", o.reload)
	}
	if o.name == "" {
		o.name = getenv("POD_NAME")
	}
	if o.name == "" {
		o.name, _ = os.Hostname()
	}
	if o.advertise == "" {
		o.advertise = getenv("POD_IP")
	}
	if o.advertise != "" && net.ParseIP(o.advertise) == nil {
		return o, fmt.Errorf("-advertise %q is not an IP address", o.advertise)
	}
	o.join, o.store = list(join), list(store)
	if o.secretFile != "" {
		b, err := os.ReadFile(o.secretFile)
		if err != nil {
			return o, fmt.Errorf("-secret-file: %w", err)
		}
		if o.secret, err = parseSecret(b); err != nil {
			return o, fmt.Errorf("-secret-file %s: %w", o.secretFile, err)
		}
	}
	return o, nil
}

// parseSecret reads 64 hex characters, surrounding whitespace ignored.
func parseSecret(b []byte) ([]byte, error) {
	b = bytes.TrimSpace(b)
	if len(b) != 64 {
		return nil, fmt.Errorf("%d characters, want 64 hex characters (32 bytes)", len(b))
	}
	s, err := hex.DecodeString(string(b))
	if err != nil {
		return nil, errors.New("not hex: want 64 hex characters (32 bytes)")
	}
	return s, nil
}

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
