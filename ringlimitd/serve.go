package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/ringlimit/ringlimit/metrics"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/ringlimitd/internal/rls"
	"google.golang.org/grpc"
)

func run(o options) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d, err := start(ctx, o, log)
	if err != nil {
		return err
	}
	log.Info("serving", "name", o.name, "grpc", d.grpcLn.Addr().String(), "http", d.httpLn.Addr().String(),
		"gossip", d.n.GossipAddr(), "peer", d.n.RPCAddr(), "join", o.join, "store", o.store, "config", o.config)
	err = d.serve(ctx)
	return errors.Join(err, d.close())
}

// daemon is one running ringlimitd: a node, the service on it, and its
// two servers.
type daemon struct {
	n       *node.Node
	svc     *rls.Service
	watch   *watcher
	grpc    *grpc.Server
	http    *http.Server
	grpcLn  net.Listener
	httpLn  net.Listener
	wg      sync.WaitGroup
	stopped chan struct{}
}

// nodeConfig is the node's Config for o.
func (o options) nodeConfig(log *slog.Logger) node.Config {
	nc := node.Config{
		Name:        o.name,
		GossipAddr:  bindAll(o.gossip),
		RPCAddr:     bindAll(o.peer),
		Join:        o.join,
		ValkeyAddrs: o.store,
		SecretKey:   o.secret,
		Logger:      log,
	}
	if o.timing == "fast" {
		nc.Gossip = node.GossipFast
	}
	if o.advertise != "" {
		nc.GossipAdvertise = net.JoinHostPort(o.advertise, port(o.gossip))
		nc.RPCAdvertise = net.JoinHostPort(o.advertise, port(o.peer))
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

// start loads the config, starts the node and listens; serve serves.
func start(ctx context.Context, o options, log *slog.Logger) (*daemon, error) {
	reg := prometheus.NewRegistry()
	obs, err := newObserver(reg)
	if err != nil {
		return nil, err
	}
	w, err := newWatcher(o.config, o.merge, log, obs)
	if err != nil {
		return nil, err
	}
	n, err := node.New(o.nodeConfig(log))
	if err != nil {
		return nil, err
	}
	d := &daemon{n: n, watch: w, stopped: make(chan struct{})}
	d.svc = rls.New(n, nil, obs)
	d.svc.SetConfig(w.current())
	w.apply = d.svc.SetConfig
	errs := []error{
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
		metrics.Register(reg, n),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, n.Close())
	}
	if d.grpcLn, err = net.Listen("tcp", o.grpc); err == nil {
		if d.httpLn, err = net.Listen("tcp", o.http); err != nil {
			d.grpcLn.Close()
		}
	}
	if err != nil {
		return nil, errors.Join(err, n.Close())
	}
	d.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(maxBody))
	pb.RegisterRateLimitServiceServer(d.grpc, d.svc)
	d.http = &http.Server{Handler: d.handler(reg), ReadHeaderTimeout: 5 * time.Second}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		w.run(ctx, o.reload, d.stopped)
	}()
	return d, nil
}

// serve serves until ctx is done or a server fails.
func (d *daemon) serve(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- d.grpc.Serve(d.grpcLn) }()
	go func() { errc <- d.http.Serve(d.httpLn) }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

// close stops the servers (requests in flight finish, within 10 s), then
// the node (which hands its keys to the other members) and the watcher.
func (d *daemon) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { d.grpc.GracefulStop(); close(done) }()
	herr := d.http.Shutdown(ctx)
	select {
	case <-done:
	case <-ctx.Done():
		d.grpc.Stop()
	}
	close(d.stopped)
	d.wg.Wait()
	return errors.Join(herr, d.n.Close())
}

// The node gives back what a refused request charged (rls.Giver).
var _ rls.Giver = (*node.Node)(nil)
