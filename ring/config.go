package ring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrInvalidConfig is wrapped by the error NewMembership returns for a
// Config it refuses.
var ErrInvalidConfig = errors.New("ring: invalid config")

// LAN defaults: the values a zero Config field means.
const (
	defaultBindAddr          = "0.0.0.0"
	defaultProbeInterval     = time.Second
	defaultProbeTimeout      = 500 * time.Millisecond
	defaultSuspicionMult     = 4
	defaultSuspicionMaxMult  = 6
	defaultAwarenessMaxMult  = 8
	defaultGossipInterval    = 200 * time.Millisecond
	defaultPushPullInterval  = 30 * time.Second
	defaultTCPTimeout        = 10 * time.Second
	defaultReconnectInterval = 10 * time.Second
	defaultReconnectTimeout  = 10 * time.Minute
	defaultLeaveTimeout      = 5 * time.Second
)

// Config configures a Membership. The zero value of every field except Name
// means a documented default; the timing defaults are those of
// DefaultLANConfig.
type Config struct {
	// Name identifies this member; it must be unique in the cluster and is
	// what the Ring holds. If empty, NewMembership returns an error.
	Name string

	// BindAddr is the IP address gossip listens on (UDP and TCP). If empty,
	// "0.0.0.0" (all interfaces). It must be an IP literal, not a host name.
	BindAddr string
	// BindPort is the gossip port. If zero, the system picks a free port;
	// GossipAddr reports it.
	BindPort int

	// AdvertiseAddr is the IP address other members use to reach this one,
	// when it differs from BindAddr (NAT, containers). If empty, BindAddr,
	// or a private address of this host if BindAddr is "0.0.0.0".
	AdvertiseAddr string
	// AdvertisePort is the port other members use to reach this one. If
	// zero, the bound gossip port.
	AdvertisePort int

	// RPCAddr is the host:port of this member's peer RPC server, published
	// to the other members in its metadata (see Membership.RPCAddr). A host
	// that is empty or unspecified (":7947", "0.0.0.0:7947") stands for the
	// host this member gossips from: each member fills it in from the
	// address it sees the member at, so a server bound to every interface
	// is reached at the right one. If empty, no RPC address is published.
	RPCAddr string
	// Incarnation tells this run of the member from an earlier one under
	// the same name (a restart): a number that changes at every start, such
	// as the start time. Published in the metadata (Event.Incs).
	Incarnation uint64

	// SecretKey encrypts and authenticates gossip with AES-GCM; it must be
	// 16, 24 or 32 bytes. Members with different keys, or one with a key and
	// one without, cannot join each other. If nil, gossip is neither
	// encrypted nor authenticated.
	SecretKey []byte
	// SecretKeys lists other keys whose gossip is accepted, for a rotation:
	// gossip is sent under SecretKey and read under any of them. Each must
	// be 16, 24 or 32 bytes, and SecretKey must be set. If empty, SecretKey
	// only.
	SecretKeys [][]byte
	// Label names the cluster: it prefixes every gossip packet and stream
	// (and is authenticated when SecretKey is set), and a member rejects
	// traffic with another label or none. At most 255 bytes. If empty, no
	// label, and labelled traffic is rejected.
	Label string

	// VirtualNodes is the number of virtual nodes per member on the Ring.
	// Every member of a cluster must use the same value. If zero, 256.
	VirtualNodes int

	// ProbeInterval is the time between failure-detection probes of a
	// random member. If zero, 1s.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for an ack before asking
	// other members to probe indirectly: about the network's 99th
	// percentile round trip. If zero, 500ms.
	ProbeTimeout time.Duration
	// SuspicionMult scales how long a member that failed a probe stays
	// suspect before it is declared failed: SuspicionMult × log10(members)
	// × ProbeInterval (log10 at least 1). If zero, 4.
	SuspicionMult int
	// SuspicionMaxTimeoutMult bounds the suspicion time at this multiple
	// of the base suspicion time while too few members confirm the
	// suspicion. If zero, 6.
	SuspicionMaxTimeoutMult int
	// AwarenessMaxMultiplier bounds how far a member that finds itself
	// unhealthy (its probes fail while the members it asks for help do not
	// answer either, or it had to refute a suspicion of itself: it is the
	// one that is slow, say descheduled by a CPU quota) stretches its probe
	// interval, and with it the time a probe waits for indirect acks,
	// before it suspects anyone (Lifeguard's local health: memberlist's
	// awareness). If zero, 8.
	AwarenessMaxMultiplier int
	// Stalled, if not nil, reports how long this member's process was
	// descheduled at a stretch lately (a node gives its scheduling lag). A
	// member declared failed while that is 50ms or more stays on this
	// member's ring for twice as long (at most 1s), and stays for good if
	// it refutes meanwhile: a member that cannot run on time does not
	// trust its own verdicts at once (Lifeguard's local health), while a
	// member that runs on time drops a failed one at once. It is called
	// under the Membership's lock: it must be cheap and must not block. If
	// nil, failed members are dropped at once.
	Stalled func() time.Duration
	// GossipInterval is the time between gossip rounds that spread changes
	// to a few random members. If zero, 200ms.
	GossipInterval time.Duration
	// PushPullInterval is the time between full state exchanges with a
	// random member; failed members are also gossiped to for this long. If
	// zero, 30s.
	PushPullInterval time.Duration
	// TCPTimeout bounds dialing, reading and writing a gossip stream (join,
	// state exchange, probe fallback). It is also how long an idle inbound
	// stream may outlive Shutdown. If zero, 10s.
	TCPTimeout time.Duration

	// ReconnectInterval is the time between attempts to re-join members
	// that failed (not those that left), which is what merges the halves of
	// a healed partition. If zero, 10s; if negative, no reconnect attempts.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a failed member is remembered for
	// reconnect attempts. If zero, 10 minutes.
	ReconnectTimeout time.Duration

	// Seeds are gossip addresses to join, host:port (a bare host means
	// this member's port), where host may be a DNS name that resolves to
	// many addresses (a Kubernetes headless Service). JoinSeeds joins them;
	// while this member is alone or remembers failed members, the
	// Membership resolves them again and joins the addresses it does not
	// know every SeedInterval, so a cluster whose every member restarted
	// with new addresses forms again. If empty, none.
	Seeds []string
	// Resolve returns the addresses of a seed's host name: IP addresses
	// (joined at the seed's port) or host:port pairs. It must return when
	// ctx is done. If nil, net.DefaultResolver's LookupHost.
	Resolve func(ctx context.Context, host string) ([]string, error)
	// SeedInterval is the time between attempts to join the Seeds while
	// alone or partitioned. If zero, 1s; if negative, no attempts.
	SeedInterval time.Duration

	// OnChange, if not nil, is called after every change of the member set
	// or of a member's metadata, with the new ring already published (if
	// nil, changes are not reported; Ring follows them all the same). It
	// is called from a single goroutine owned by the Membership, in order,
	// never concurrently and never under memberlist's locks. It may block,
	// but while it does the ring is not updated: later changes wait, and
	// are then delivered as one Event. It must not call Shutdown.
	OnChange func(Event)

	// Logger receives the membership's logs, and memberlist's (bridged at
	// their levels). If nil, logs are discarded.
	Logger *slog.Logger
	// LogSummary is the interval over which repeated lines of one kind
	// (memberlist's, such as one per junk packet) are written once and then
	// counted into one summary line. If zero, 10 s.
	LogSummary time.Duration

	// WrapTransport, if not nil, is given the member's advertised gossip
	// address and the UDP/TCP transport bound to BindAddr:BindPort, and
	// returns the Transport the member's outgoing gossip goes through: a
	// hook for tests that drop or delay traffic. If nil, the transport is
	// used as it is.
	WrapTransport func(self string, t Transport) Transport

	afterCreate func(*Membership) // tests: runs after memberlist starts, before the first ring
}

// DefaultLANConfig returns a Config for a cluster on a local network:
// memberlist's LAN timings (probes every 1s, a killed member is declared
// failed after several seconds), gossip on port 7946 of every interface, and
// reconnect attempts every 10s.
func DefaultLANConfig(name string) Config {
	return Config{
		Name:                    name,
		BindAddr:                defaultBindAddr,
		BindPort:                7946,
		VirtualNodes:            DefaultVirtualNodes,
		ProbeInterval:           defaultProbeInterval,
		ProbeTimeout:            defaultProbeTimeout,
		SuspicionMult:           defaultSuspicionMult,
		SuspicionMaxTimeoutMult: defaultSuspicionMaxMult,
		AwarenessMaxMultiplier:  defaultAwarenessMaxMult,
		GossipInterval:          defaultGossipInterval,
		PushPullInterval:        defaultPushPullInterval,
		TCPTimeout:              defaultTCPTimeout,
		ReconnectInterval:       defaultReconnectInterval,
		ReconnectTimeout:        defaultReconnectTimeout,
		SeedInterval:            defaultSeedInterval,
	}
}

// FastLocalConfig returns a Config for tests and small clusters on one host
// or a fast network: gossip on a free port of 127.0.0.1, probes every 100ms,
// so a killed member is declared failed in about half a second, and
// reconnect attempts every 250ms, so a healed partition merges within about
// a second. Its short TCPTimeout also bounds how long Shutdown leaves an idle
// inbound stream behind.
//
// A member that is only slow must not be dropped: a suspect has 300ms
// (SuspicionMult 3 × ProbeInterval) to refute, which covers an answer 200ms
// late plus a gossip round; a member whose own probes fail while the
// members it asks for help do not answer either stretches its probe
// interval up to 8× (AwarenessMaxMultiplier) before it suspects anyone.
// Measured beside the earlier 200ms (SuspicionMult 2), three members, one
// process each, 60s: with 200ms of latency and 5% loss on one member's
// egress, 0 drops (the earlier preset: 2 of it, 115 by it); in the test/chaos
// suite, paired runs, a killed member dropped in 0.42–0.52s (earlier preset
// 0.31–0.51s) and a 2|1 partition in 0.41–0.51s (0.31–0.46s). A longer
// unconfirmed suspicion (SuspicionMaxTimeoutMult 3) or a wider awareness
// (16) slowed a partition's detection to 1.0–1.1s: not taken.
func FastLocalConfig(name string) Config {
	return Config{
		Name:                    name,
		BindAddr:                "127.0.0.1",
		BindPort:                0,
		VirtualNodes:            DefaultVirtualNodes,
		ProbeInterval:           100 * time.Millisecond,
		ProbeTimeout:            50 * time.Millisecond,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 1,
		AwarenessMaxMultiplier:  8,
		GossipInterval:          20 * time.Millisecond,
		PushPullInterval:        2 * time.Second,
		TCPTimeout:              500 * time.Millisecond,
		ReconnectInterval:       250 * time.Millisecond,
		ReconnectTimeout:        time.Minute,
		SeedInterval:            250 * time.Millisecond,
	}
}

// validate checks c and returns a copy with the zero values replaced by
// their defaults.
func (c Config) validate() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if c.Name == "" {
		return bad("empty Name")
	}
	if c.BindAddr == "" {
		c.BindAddr = defaultBindAddr
	}
	if net.ParseIP(c.BindAddr) == nil {
		return bad("BindAddr %q is not an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return bad("AdvertiseAddr %q is not an IP address", c.AdvertiseAddr)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		return bad("BindPort %d out of range", c.BindPort)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return bad("AdvertisePort %d out of range", c.AdvertisePort)
	}
	if c.RPCAddr != "" {
		if _, _, err := net.SplitHostPort(c.RPCAddr); err != nil {
			return bad("RPCAddr %q: %w", c.RPCAddr, err)
		}
		if n := len(meta{RPCAddr: c.RPCAddr}.encode()); n > metaMaxSize {
			return bad("RPCAddr too long (%d bytes of metadata, limit %d)", n, metaMaxSize)
		}
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return bad("SecretKey is %d bytes, want 16, 24 or 32", len(c.SecretKey))
	}
	if len(c.SecretKeys) > 0 && len(c.SecretKey) == 0 {
		return bad("SecretKeys without a SecretKey")
	}
	for i, k := range c.SecretKeys {
		switch len(k) {
		case 16, 24, 32:
		default:
			return bad("SecretKeys[%d] is %d bytes, want 16, 24 or 32", i, len(k))
		}
	}
	if len(c.Label) > memberlist.LabelMaxSize {
		return bad("Label is %d bytes, limit %d", len(c.Label), memberlist.LabelMaxSize)
	}
	if c.VirtualNodes < 0 {
		return bad("negative VirtualNodes")
	}
	if c.VirtualNodes == 0 {
		c.VirtualNodes = DefaultVirtualNodes
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"ProbeInterval", &c.ProbeInterval, defaultProbeInterval},
		{"ProbeTimeout", &c.ProbeTimeout, defaultProbeTimeout},
		{"GossipInterval", &c.GossipInterval, defaultGossipInterval},
		{"PushPullInterval", &c.PushPullInterval, defaultPushPullInterval},
		{"TCPTimeout", &c.TCPTimeout, defaultTCPTimeout},
		{"ReconnectTimeout", &c.ReconnectTimeout, defaultReconnectTimeout},
	} {
		if *d.v < 0 {
			return bad("negative %s", d.name)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.ReconnectInterval == 0 {
		c.ReconnectInterval = defaultReconnectInterval
	}
	if c.SeedInterval == 0 {
		c.SeedInterval = defaultSeedInterval
	}
	if c.ProbeTimeout > c.ProbeInterval {
		return bad("ProbeTimeout %v longer than ProbeInterval %v", c.ProbeTimeout, c.ProbeInterval)
	}
	for _, m := range []struct {
		name string
		v    *int
		def  int
	}{
		{"SuspicionMult", &c.SuspicionMult, defaultSuspicionMult},
		{"SuspicionMaxTimeoutMult", &c.SuspicionMaxTimeoutMult, defaultSuspicionMaxMult},
		{"AwarenessMaxMultiplier", &c.AwarenessMaxMultiplier, defaultAwarenessMaxMult},
	} {
		if *m.v < 0 {
			return bad("negative %s", m.name)
		}
		if *m.v == 0 {
			*m.v = m.def
		}
	}
	return c, nil
}
