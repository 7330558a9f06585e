package remote

import (
	"crypto/tls"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Options say how to reach the central store. ringlimit owns this type and
// maps it onto its Valkey client (valkey-go), so replacing the client does
// not change the API of the packages above.
//
//   - One server: Addrs holds its host:port.
//   - Valkey Cluster: Addrs holds seed nodes; the client learns the rest of
//     the cluster from them and follows its slot map. With a single seed,
//     set Cluster (one address alone means one server).
//   - Sentinel: Sentinel.MasterSet names the master set, and Sentinel.Addrs
//     the sentinels; the client follows the set's master through failovers.
type Options struct {
	// Addrs are the server's or the cluster's seed addresses (host:port).
	Addrs []string
	// Cluster says the addresses are a Valkey Cluster's seeds. Needed only
	// with a single seed: several addresses are taken as a cluster.
	Cluster bool
	// Username and Password authenticate (AUTH). Empty: no AUTH (or the
	// "default" user with Password alone).
	Username, Password string
	// TLS, if not nil, makes every connection TLS with this configuration.
	TLS *tls.Config
	// Sentinel, if MasterSet is not empty, finds the master through
	// Sentinel; Addrs is then ignored.
	Sentinel SentinelOptions
	// DialTimeout bounds one connection attempt. If zero, 1 s.
	DialTimeout time.Duration
}

// SentinelOptions find the master of a Sentinel-monitored set.
type SentinelOptions struct {
	// MasterSet is the name of the master set the sentinels monitor.
	MasterSet string
	// Addrs are the sentinels' addresses (host:port).
	Addrs []string
	// Username and Password authenticate to the sentinels, if they need it.
	Username, Password string
	// TLS, if not nil, is the sentinels' TLS configuration.
	TLS *tls.Config
}

// client maps o onto valkey-go's options. Client-side caching is off: it is
// no use for counters.
func (o Options) client() valkey.ClientOption {
	opt := valkey.ClientOption{
		InitAddress:  o.Addrs,
		Username:     o.Username,
		Password:     o.Password,
		TLSConfig:    o.TLS,
		DisableCache: true,
		// One address is one server unless said otherwise: no cluster
		// discovery, and no background refresh left behind on Close.
		ForceSingleClient: len(o.Addrs) == 1 && !o.Cluster,
	}
	opt.Dialer.Timeout = o.DialTimeout
	if opt.Dialer.Timeout <= 0 {
		// valkey-go's default is 5 s; Close waits for an attempt in flight.
		opt.Dialer.Timeout = time.Second
	}
	if s := o.Sentinel; s.MasterSet != "" {
		opt.InitAddress = s.Addrs
		opt.ForceSingleClient = false
		opt.Sentinel = valkey.SentinelOption{
			MasterSet: s.MasterSet,
			Username:  s.Username,
			Password:  s.Password,
			TLSConfig: s.TLS,
		}
	}
	return opt
}
