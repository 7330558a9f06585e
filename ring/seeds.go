package ring

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"time"
)

// maxSeedAddrs bounds the addresses one round of JoinSeeds tries, however
// many the seeds resolve to.
const maxSeedAddrs = 64

// defaultSeedInterval is the SeedInterval a zero Config field means.
const defaultSeedInterval = time.Second

// JoinSeeds resolves Config.Seeds again (with Config.Resolve) and joins the
// addresses that are not this member or a live member already, at most 64,
// chosen at random, one after the other until ctx is done (each attempt
// takes at most TCPTimeout). It returns how many it reached, and an error
// if there was something to join and it reached none (wrapping
// ringlimit.ErrClosed after Shutdown).
//
// While this member is alone or has failed members, the Membership calls it
// by itself every SeedInterval, so a cluster whose every member restarted
// with new addresses (a Kubernetes Deployment rolled at once, behind a
// headless Service) forms again from the names alone.
func (m *Membership) JoinSeeds(ctx context.Context) (int, error) {
	addrs, members := m.seedAddrs(ctx)
	if len(addrs) == 0 {
		if len(m.cfg.Seeds) == 0 || members > 0 {
			// Nothing to join, or every seed is a member already (they
			// found this member first): joined.
			return members, nil
		}
		return 0, fmt.Errorf("ring: join seeds %v: no address to join", m.cfg.Seeds)
	}
	reached := 0
	var err error
	for _, a := range addrs { // one at a time, so that ctx stops them between
		if ctx.Err() != nil {
			break
		}
		var n int
		if n, err = m.Join([]string{a}); n > 0 {
			reached++
		}
	}
	if reached > 0 {
		return reached, nil
	}
	if err == nil {
		err = ctx.Err()
	}
	return 0, err
}

// seedAddrs resolves the seeds and returns the addresses to join: no
// duplicates, not this member, not a live member, at most maxSeedAddrs;
// and how many seed addresses are live members already.
func (m *Membership) seedAddrs(ctx context.Context) (addrs []string, members int) {
	self := map[string]bool{m.gossipAddr: true, m.bindAddr: true}
	live := map[string]bool{}
	m.mu.Lock()
	for name, info := range m.members {
		if name != m.cfg.Name {
			live[info.addr] = true
		}
	}
	m.mu.Unlock()
	skip := map[string]bool{}
	for _, seed := range m.cfg.Seeds {
		host, port, err := net.SplitHostPort(seed)
		if err != nil { // a bare host: this member's own port
			host, port = seed, strconv.Itoa(m.cfg.BindPort)
			if m.cfg.AdvertisePort != 0 {
				port = strconv.Itoa(m.cfg.AdvertisePort)
			}
		}
		hosts := []string{host}
		if net.ParseIP(host) == nil {
			rctx, cancel := context.WithTimeout(ctx, m.cfg.TCPTimeout)
			resolve := m.cfg.Resolve
			if resolve == nil {
				resolve = defaultResolve
			}
			hosts, err = resolve(rctx, host)
			cancel()
			if err != nil {
				m.log.Debug("ring: cannot resolve seed", "seed", seed, "err", err)
				continue
			}
		}
		for _, h := range hosts {
			addr := h
			if _, _, err := net.SplitHostPort(h); err != nil {
				addr = net.JoinHostPort(h, port)
			}
			if skip[addr] || self[addr] {
				continue
			}
			skip[addr] = true
			if live[addr] {
				members++
				continue
			}
			addrs = append(addrs, addr)
		}
	}
	rand.Shuffle(len(addrs), func(i, j int) { addrs[i], addrs[j] = addrs[j], addrs[i] })
	return addrs[:min(len(addrs), maxSeedAddrs)], members
}

// seedLoop joins the seeds every SeedInterval while this member is alone or
// has failed members (a partition, or members that restarted elsewhere).
func (m *Membership) seedLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.SeedInterval)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.wg.Add(1)
	go func() { // Shutdown cancels a resolution in flight
		defer m.wg.Done()
		<-m.stop
		cancel()
	}()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		if m.left.Load() || !m.lonely() {
			continue
		}
		if n, err := m.JoinSeeds(ctx); err != nil {
			m.log.Debug("ring: seeds not joined", "err", err)
		} else if n > 0 {
			m.log.Info("ring: joined seeds", "reached", n)
		}
	}
}

// lonely reports whether this member is alone on its ring or remembers
// failed members.
func (m *Membership) lonely() bool {
	if m.Ring().Len() <= 1 {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.failed) > 0
}

// defaultResolve resolves host with net.DefaultResolver.
func defaultResolve(ctx context.Context, host string) ([]string, error) {
	return net.DefaultResolver.LookupHost(ctx, host)
}
