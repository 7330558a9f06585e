package ring

import (
	"fmt"
	"log"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/logsum"
)

// Event describes one change of the membership, as delivered to
// Config.OnChange. Changes that happen while the previous Event is being
// handled are merged into the next one, so a member that came and went in
// between may appear in neither list.
type Event struct {
	Joined  []string // members that came (or came back), sorted
	Left    []string // members that left (this one too, after Leave) or were declared failed, sorted
	Updated []string // members that stayed but changed their metadata, sorted
	Ring    *Ring    // the ring after the change, already published
	// Addrs is each live member's RPC address after the change (the
	// membership's published table: read it, do not modify it). An
	// OnChange callback reads addresses here rather than through the
	// Membership, which may not be in its caller's hands yet.
	Addrs map[string]string
	// Incs is each live member's incarnation (Config.Incarnation; 0 if it
	// publishes none). A member that restarted under the same name between
	// two changes is in Updated, with another incarnation.
	Incs map[string]uint64
}

// memberInfo is what the event delegate records about a live member.
type memberInfo struct {
	rpcAddr string
	inc     uint64
	addr    string // gossip host:port
}

// failedMember is a member declared failed, remembered for reconnecting.
type failedMember struct {
	addr string    // its gossip address
	at   time.Time // when it was declared failed
}

// maxRemembered bounds how many failed members (for reconnecting) and leave
// intents are remembered; beyond it the oldest is forgotten.
const maxRemembered = 256

// reconnectsPerRound bounds the join attempts of one reconnect round.
const reconnectsPerRound = 4

// Membership keeps this process in a gossip cluster (hashicorp/memberlist)
// and a consistent-hash Ring of the live members current.
//
// Every change of the member set publishes a new Ring; Ring and RPCAddr read
// the current snapshot without taking a lock. A Membership is safe for
// simultaneous use by multiple goroutines.
type Membership struct {
	cfg        Config
	log        *slog.Logger
	sum        *logsum.Summarizer // repeated lines: memberlist's, unreadable metadata
	ml         *memberlist.Memberlist
	gossipAddr string // advertised host:port
	bindAddr   string // bound host:port

	ring  atomic.Pointer[Ring]
	peers atomic.Pointer[map[string]string] // name → RPC address
	incs  map[string]uint64                 // name → incarnation, as last published (run's goroutine only)

	mu       sync.Mutex // guards the maps below; never held while calling memberlist
	members  map[string]memberInfo
	failed   map[string]failedMember // members to reconnect to
	leaving  map[string]time.Time    // members that announced they leave, and when
	leftInc  map[string]uint64       // the incarnation each of them had then, if known
	held     map[string]heldMember   // members declared failed, kept on the ring a while (health.go)
	refused  map[string]memberInfo   // members dropped because their gossip port refused (refused.go)
	checking map[string]bool         // members whose port is being checked
	checked  map[string]time.Time    // when each was last checked (at most maxRemembered)

	bcast *memberlist.TransmitLimitedQueue // our gossip messages: leave intents
	// sendLeave sends a leave intent to one member over a stream: the
	// memberlist's SendReliable (a test counts the sends in flight).
	sendLeave func(to *memberlist.Node, msg []byte) error

	kick chan struct{} // capacity 1: a change is waiting to be applied
	stop chan struct{} // closed by Shutdown
	wg   sync.WaitGroup

	life         sync.RWMutex // Join and Leave hold it shared; Shutdown sets closed under it
	closed       bool
	left         atomic.Bool
	shutdownOnce sync.Once
	shutdownErr  error
}

// NewMembership validates cfg, starts gossip on cfg.BindAddr:cfg.BindPort
// and returns a Membership whose ring holds only this member; Join then
// joins a cluster. A bad Config is an error wrapping ErrInvalidConfig.
// Shutdown stops what NewMembership started.
func NewMembership(cfg Config) (*Membership, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	m := &Membership{
		cfg:      cfg,
		log:      cfg.Logger,
		members:  make(map[string]memberInfo),
		failed:   make(map[string]failedMember),
		leaving:  make(map[string]time.Time),
		leftInc:  make(map[string]uint64),
		held:     make(map[string]heldMember),
		refused:  make(map[string]memberInfo),
		checking: make(map[string]bool),
		checked:  make(map[string]time.Time),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.log = m.log.With("member", cfg.Name)
	if cfg.Logger != nil {
		m.sum = logsum.New(m.log, cfg.LogSummary)
	}
	mlog := memberlistLogger(cfg.Logger, m.sum)

	nt, err := newNetTransport(cfg.BindAddr, cfg.BindPort, mlog)
	if err != nil {
		return nil, fmt.Errorf("ring: listen on %s: %w", net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort)), err)
	}
	port := nt.GetAutoBindPort()
	m.bindAddr = net.JoinHostPort(cfg.BindAddr, strconv.Itoa(port))
	var tr memberlist.Transport = nt
	if cfg.WrapTransport != nil {
		advPort := cfg.AdvertisePort
		if advPort == 0 {
			advPort = port
		}
		self := ""
		if ip, p, err := nt.FinalAdvertiseAddr(cfg.AdvertiseAddr, advPort); err == nil {
			self = net.JoinHostPort(ip.String(), strconv.Itoa(p))
		}
		out := cfg.WrapTransport(self, nt)
		if out == nil {
			_ = nt.Shutdown()
			return nil, fmt.Errorf("%w: WrapTransport returned nil", ErrInvalidConfig)
		}
		tr = &wrapped{Transport: nt, out: out}
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.Transport = tr
	mc.BindAddr = cfg.BindAddr
	mc.BindPort = port
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.AdvertisePort = cfg.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = port
	}
	mc.SecretKey = slices.Clone(cfg.SecretKey)
	if len(cfg.SecretKeys) > 0 {
		// Sends under SecretKey (memberlist adds it and makes it primary),
		// reads under any key of the ring.
		kr, err := memberlist.NewKeyring(cloneKeys(cfg.SecretKeys), mc.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("ring: keyring: %w", err)
		}
		mc.Keyring = kr
	}
	mc.Label = cfg.Label
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = cfg.ProbeTimeout
	mc.SuspicionMult = cfg.SuspicionMult
	mc.SuspicionMaxTimeoutMult = cfg.SuspicionMaxTimeoutMult
	mc.AwarenessMaxMultiplier = cfg.AwarenessMaxMultiplier
	mc.GossipInterval = cfg.GossipInterval
	mc.PushPullInterval = cfg.PushPullInterval
	mc.GossipToTheDeadTime = cfg.PushPullInterval
	mc.TCPTimeout = cfg.TCPTimeout
	m.bcast = &memberlist.TransmitLimitedQueue{
		NumNodes:       func() int { return m.Ring().Len() },
		RetransmitMult: mc.RetransmitMult,
	}
	mc.Delegate = &delegate{m: m, meta: meta{RPCAddr: cfg.RPCAddr, Inc: cfg.Incarnation}.encode()}
	mc.Events = (*events)(m)
	mc.Logger = mlog
	mc.LogOutput = nil

	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		return nil, fmt.Errorf("ring: start memberlist: %w", err)
	}
	m.ml = ml
	m.sendLeave = ml.SendReliable
	m.gossipAddr = ml.LocalNode().Address()
	if cfg.afterCreate != nil {
		cfg.afterCreate(m)
	}
	// The first ring is this member alone, with no Event for it. Members
	// may know of it already (a restart on the port they reconnect to):
	// run delivers them as the first Event, like any later change.
	m.ring.Store(New([]string{cfg.Name}, cfg.VirtualNodes))
	m.peers.Store(&map[string]string{cfg.Name: cfg.RPCAddr})
	m.incs = map[string]uint64{cfg.Name: cfg.Incarnation}
	m.notify()

	m.wg.Add(1)
	go m.run()
	if cfg.ReconnectInterval > 0 {
		m.wg.Add(1)
		go m.reconnectLoop()
	}
	if cfg.SeedInterval > 0 && len(cfg.Seeds) > 0 {
		m.wg.Add(1)
		go m.seedLoop()
	}
	m.log.Debug("ring: membership started", "gossip", m.gossipAddr, "bind", m.bindAddr)
	return m, nil
}

// newNetTransport binds memberlist's UDP/TCP transport. With port 0 it
// retries a few times: the system picks a free TCP port, and the same UDP
// port may be taken.
func newNetTransport(addr string, port int, logger *log.Logger) (*memberlist.NetTransport, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{addr}, BindPort: port, Logger: logger}
	tries := 1
	if port == 0 {
		tries = 10
	}
	var err error
	for range tries {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(nc); err == nil {
			return nt, nil
		}
	}
	return nil, err
}

// Join contacts each of addrs (host:port of members' gossip addresses) and
// exchanges state with it, which makes this member known to the cluster. It
// returns how many it reached, and an error if it reached none. It returns
// ringlimit.ErrClosed after Shutdown.
func (m *Membership) Join(addrs []string) (int, error) {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.closed {
		return 0, fmt.Errorf("ring: join: %w", ringlimit.ErrClosed)
	}
	n, err := m.ml.Join(addrs)
	if err != nil {
		return n, fmt.Errorf("ring: join %v: %w", addrs, err)
	}
	return n, nil
}

// Leave tells the cluster that this member is leaving, so the others drop it
// at once instead of detecting a failure and do not try to reconnect to it,
// and waits until the news has gone out, at most timeout (if timeout ≤ 0,
// 5s). It also stops this member's reconnect attempts. Once the leave is
// recorded, this member's own ring no longer holds it (an Event reports it
// in Left): its keys route to their next owners, the targets of a handoff.
// Gossip keeps running until Shutdown, which should follow. It returns
// ringlimit.ErrClosed after Shutdown.
func (m *Membership) Leave(timeout time.Duration) error {
	m.life.RLock()
	defer m.life.RUnlock()
	if m.closed {
		return fmt.Errorf("ring: leave: %w", ringlimit.ErrClosed)
	}
	if timeout <= 0 {
		timeout = defaultLeaveTimeout
	}
	deadline := time.Now().Add(timeout)
	m.left.Store(true)
	m.announceLeave(timeout / 2)
	if err := m.ml.Leave(max(time.Until(deadline), time.Millisecond)); err != nil {
		return fmt.Errorf("ring: leave: %w", err)
	}
	return nil
}

// Shutdown stops gossip without leaving: the others detect this member as
// failed (call Leave first to leave gracefully). It stops every goroutine
// the Membership started and waits for them: for a running OnChange call,
// and for a reconnect or seed join attempt in flight (at most TCPTimeout). An idle
// inbound gossip stream of memberlist's may outlive it by up to TCPTimeout.
// The last Ring stays readable. Calling Shutdown again returns the first
// call's result. It must not be called from OnChange.
func (m *Membership) Shutdown() error {
	m.shutdownOnce.Do(func() {
		m.life.Lock()
		m.closed = true
		m.life.Unlock()
		close(m.stop)
		m.wg.Wait()
		m.stopHolds()
		if err := m.ml.Shutdown(); err != nil {
			m.shutdownErr = fmt.Errorf("ring: shutdown: %w", err)
		}
		m.sum.Flush(true)
		m.log.Debug("ring: membership stopped")
	})
	return m.shutdownErr
}

// Ring returns the current ring of live members (suspected members stay on
// it until declared failed). It takes no lock.
func (m *Membership) Ring() *Ring { return m.ring.Load() }

// Name returns this member's name.
func (m *Membership) Name() string { return m.cfg.Name }

// GossipAddr returns the host:port other members reach this one at (the
// advertised address): what to pass to Join.
func (m *Membership) GossipAddr() string { return m.gossipAddr }

// BindAddr returns the host:port gossip is bound to, with the port the
// system picked if BindPort was zero.
func (m *Membership) BindAddr() string { return m.bindAddr }

// RPCAddr returns the peer RPC address the named member published in its
// metadata (Config.RPCAddr, possibly ""), and whether the member is on the
// current snapshot. It takes no lock. Right after a member leaves it may
// report false for a name that a Ring obtained earlier still holds.
func (m *Membership) RPCAddr(name string) (string, bool) {
	addr, ok := (*m.peers.Load())[name]
	return addr, ok
}

// run applies membership changes and delivers Events, one at a time.
func (m *Membership) run() {
	defer m.wg.Done()
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		}
		ev, changed := m.apply()
		if changed && m.cfg.OnChange != nil {
			m.cfg.OnChange(ev)
		}
	}
}

// apply publishes a new ring and peer table from the members the event
// delegate recorded, and reports what changed since the last publication.
func (m *Membership) apply() (Event, bool) {
	m.mu.Lock()
	peers := make(map[string]string, len(m.members))
	incs := make(map[string]uint64, len(m.members))
	for name, info := range m.members {
		peers[name] = info.rpcAddr
		incs[name] = info.inc
	}
	m.mu.Unlock()
	oldIncs := m.incs

	var ev Event
	old := m.ring.Load()
	var oldPeers map[string]string
	if p := m.peers.Load(); p != nil {
		oldPeers = *p
	}
	for name, addr := range peers {
		if prev, ok := oldPeers[name]; !ok {
			ev.Joined = append(ev.Joined, name)
		} else if prev != addr || oldIncs[name] != incs[name] {
			ev.Updated = append(ev.Updated, name)
		}
	}
	for name := range oldPeers {
		if _, ok := peers[name]; !ok {
			ev.Left = append(ev.Left, name)
		}
	}
	slices.Sort(ev.Joined)
	slices.Sort(ev.Left)
	slices.Sort(ev.Updated)

	r := old
	if r == nil || len(ev.Joined) > 0 || len(ev.Left) > 0 {
		r = New(slices.Collect(maps.Keys(peers)), m.cfg.VirtualNodes)
	}
	// Peers first: whoever finds a name on the new ring finds its address.
	m.peers.Store(&peers)
	m.ring.Store(r)
	m.incs = incs
	ev.Ring, ev.Addrs, ev.Incs = r, peers, incs
	changed := len(ev.Joined)+len(ev.Left)+len(ev.Updated) > 0
	if changed {
		m.log.Info("ring: members changed", "joined", ev.Joined, "left", ev.Left,
			"updated", ev.Updated, "members", r.Len())
	}
	return ev, changed
}

// notify wakes run; a wake-up already pending covers this change too.
func (m *Membership) notify() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// cloneKeys copies each of keys, so that the caller's slices stay its own.
func cloneKeys(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = slices.Clone(k)
	}
	return out
}
