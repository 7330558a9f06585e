package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/rules"
)

// secretEnv carries the cluster's SecretKey (hex) from the supervisor to its
// node processes: the environment, unlike the command line, is not readable
// by other users.
const secretEnv = "RINGLIMIT_DEMO_SECRET"

// readyLine is what a node process prints on stdout once it serves.
type readyLine struct {
	Ready  bool   `json:"ready"`
	Name   string `json:"name"`
	HTTP   string `json:"http"`
	Gossip string `json:"gossip"`
	RPC    string `json:"rpc"`
}

// runNode is the hidden "node" subcommand: one ringlimit node with the demo's
// HTTP server, until SIGINT or SIGTERM.
func runNode(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c nodeConfig
	var httpAddr, join, rulesPath string
	fs.StringVar(&c.Name, "name", "", "node name, unique in the cluster")
	fs.StringVar(&httpAddr, "http", "127.0.0.1:0", "HTTP listen address")
	fs.StringVar(&c.GossipAddr, "gossip", "127.0.0.1:0", "gossip bind address")
	fs.StringVar(&c.RPCAddr, "rpc", "127.0.0.1:0", "peer RPC listen address")
	fs.StringVar(&join, "join", "", "gossip addresses to join, comma separated")
	fs.StringVar(&c.StoreAddr, "store", "", "Valkey address; empty for none")
	fs.StringVar(&rulesPath, "rules", "", "rule file (YAML), reloaded every second")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Name == "" || rulesPath == "" {
		return errors.New("node: -name and -rules are required")
	}
	if join != "" {
		c.Join = strings.Split(join, ",")
	}
	if s := os.Getenv(secretEnv); s != "" {
		key, err := hex.DecodeString(s)
		if err != nil {
			return fmt.Errorf("node: %s: %w", secretEnv, err)
		}
		c.SecretKey = key
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("node", c.Name)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	watcher, err := rules.Watch(ctx, rulesPath, rules.WatchConfig{Interval: time.Second, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n, err := newClusterNode(c, log)
	if err != nil {
		ln.Close()
		return fmt.Errorf("node: %w", err)
	}
	srv := &http.Server{Handler: newAPI(c.Name, n, watcher), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	json.NewEncoder(stdout).Encode(readyLine{Ready: true, Name: c.Name,
		HTTP: ln.Addr().String(), Gossip: n.GossipAddr(), RPC: n.RPCAddr()})

	select {
	case <-ctx.Done():
	case err = <-served:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	if cerr := n.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
