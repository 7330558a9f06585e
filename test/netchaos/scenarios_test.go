package netchaos

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

func pick(n int) int { return rand.IntN(n) }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// dropNote lists how often rings dropped each node, for notes.
func dropNote(drops map[string]int) string {
	if len(drops) == 0 {
		return "never"
	}
	var s []string
	for _, name := range slices.Sorted(maps.Keys(drops)) {
		s = append(s, fmt.Sprintf("%s×%d", name, drops[name]))
	}
	return strings.Join(s, " ")
}

// views describes what each node sees, for notes.
func (c *cluster) views() string {
	var s []string
	for _, n := range c.Nodes {
		st, err := n.Stats()
		if err != nil {
			s = append(s, n.Name()+": "+err.Error())
			continue
		}
		s = append(s, fmt.Sprintf("%s sees %d", n.Name(), len(st.Members)))
	}
	return strings.Join(s, ", ")
}

// holdFault holds a fault begun at ru.from until hold has passed. The
// fault may leave every ring as it was, so its detect is the first store
// or fail-open decision. Then holdFault ends it with heal and waits until
// every node sees every member again: its recover. It returns what each
// node saw at the end of the fault, for the note.
func (ru *run) holdFault(hold time.Duration, heal func()) string {
	c := ru.c
	ru.r.Detect = ru.l.FirstSource(ru.from, hold, "store", "fallback")
	time.Sleep(time.Until(ru.from.Add(hold))) // the fault lasts
	during := c.views()
	healed := time.Now()
	heal()
	c.WaitConverged(c.Names(), 30*time.Second)
	ru.r.Recover = time.Since(healed)
	ru.recovered()
	return during
}

// 1. A full partition 3|2 (every packet between the sides dropped, both
// ways; the store reachable from both), then healed.
func partition(t *testing.T, im images, hold time.Duration) row {
	ru := begin(t, im, five(), chaosRule)
	c := ru.c
	perm := rand.Perm(5)
	minor, major := perm[:2], perm[2:]
	c.partition(major, minor)
	c.WaitView(major, c.Without(minor...), 15*time.Second)
	c.WaitView(minor, c.Without(major...), 15*time.Second)
	ru.r.Detect = time.Since(ru.from)
	time.Sleep(hold) // the split lasts
	heal := time.Now()
	c.heal()
	c.WaitConverged(c.Names(), 30*time.Second)
	ru.r.Recover = time.Since(heal)
	ru.recovered()
	ru.r.Note = fmt.Sprintf("the minority side is %s and %s; the victim's keys are theirs", c.cnodes[minor[0]].Name(), c.cnodes[minor[1]].Name())
	return ru.finish(minor, c.Others(), func(string) int { return ringBound(chaosRule.Limit) })
}

// 2. An asymmetric partition: a drops every packet from b; b still hears
// a. Gossip's indirect probes may keep both in every ring; the peer links
// between them fail both ways (a TCP handshake needs both directions).
func asymmetric(t *testing.T, im images, hold time.Duration) row {
	ru := begin(t, im, five(), chaosRule)
	c := ru.c
	perm := rand.Perm(5)
	a, b := perm[0], perm[1]
	c.cnodes[a].ctr.Load().iptables(t, []string{"-A", "INPUT", "-s", c.cnodes[b].ip(), "-j", "DROP"})
	during := ru.holdFault(hold, c.heal)
	an, bn := c.cnodes[a].Name(), c.cnodes[b].Name()
	drops := c.drops()
	ru.r.Note = fmt.Sprintf("%s drops every packet from %s; at the end of the fault %s", an, bn, during)
	return ru.finish([]int{a, b}, c.Others(), func(k string) int {
		base := chaosRule.Limit
		if o := ru.owner[k]; o == an || o == bn {
			base = chaoskit.CutOffBound(chaosRule.Limit, 1) // forwards between a and b go to the store
		}
		return flapBound(chaosRule.Limit, drops[ru.owner[k]], base)
	})
}

// slowLimits are the latency and loss rows': ceilings above the fault's
// added round trip (a slow owner that answers is waited for, up to the
// ceiling, not replaced by the store: an operator on such a network sets
// them so), and the default gossip preset, GossipLAN, whose probes wait
// 500 ms and whose suspicion lasts at least 4 s.
func slowLimits() limits { return limits{forward: time.Second, store: time.Second, lan: true} }

// 3. Packet loss on one node: each packet it sends or receives (but the
// harness's HTTP) dropped with probability p, for three holds (longer than
// a suspicion lasts, so that a live member dropped would show).
func loss(t *testing.T, im images, p float64, hold time.Duration) row {
	ru := beginLimited(t, im, five(), chaosRule, slowLimits())
	c, v := ru.c, pick(5)
	c.loss(v, p)
	during := ru.holdFault(3*hold, c.heal)
	drops := c.drops()
	victim := c.cnodes[v].Name()
	ru.r.Note = fmt.Sprintf("the victim is %s, ceilings %s and %s, gossip GossipLAN; at the end of the loss %s",
		victim, slowLimits().forward, slowLimits().store, during)
	if p <= 0.05 {
		// TCP resends a lost segment within a few hundred milliseconds:
		// every forward is answered within the ceiling.
		ru.exact = func(k string) bool { return ru.owner[k] != victim }
		if len(drops) > 0 {
			t.Errorf("rings dropped live members: %s", dropNote(drops))
		}
	}
	return ru.finish([]int{v}, c.Others(), func(k string) int {
		if ru.exact != nil && ru.exact(k) {
			return chaosRule.Limit
		}
		// A forward to or from the victim whose segments are lost again
		// and again outlasts the ceiling: the store decides it, and the
		// owner may too once TCP delivers it.
		return flapBound(chaosRule.Limit, drops[ru.owner[k]], chaoskit.CutOffBound(chaosRule.Limit, 1))
	})
}

// 4. Added latency on one node, and loss if p > 0: every packet it sends
// (but its answers to the harness: callers run in the node's process in
// production) is held for d, for three holds. The ceilings are above the
// added round trip, so every key whose owner is not the victim is exact
// and no ring drops a member.
func latency(t *testing.T, im images, d time.Duration, p float64, hold time.Duration) row {
	ru := beginLimited(t, im, five(), chaosRule, slowLimits())
	c, v := ru.c, pick(5)
	if p > 0 {
		c.loss(v, p)
	}
	end := c.delay(v, d, im.nfdelay)
	ru.from = time.Now()
	during := ru.holdFault(3*hold, end)
	drops := c.drops()
	victim := c.cnodes[v].Name()
	lossNote := ""
	if p > 0 {
		lossNote = fmt.Sprintf(", and %g%% of its packets both ways dropped", 100*p)
	}
	ru.r.Note = fmt.Sprintf("the victim is %s (every packet it sent held %s%s), ceilings %s and %s, gossip GossipLAN; at the end of the delay %s",
		victim, d, lossNote, slowLimits().forward, slowLimits().store, during)
	if len(drops) > 0 {
		t.Errorf("rings dropped live members: %s", dropNote(drops))
	}
	ru.exact = func(k string) bool { return ru.owner[k] != victim }
	return ru.finish([]int{v}, c.Others(), func(k string) int {
		if ru.exact(k) {
			return chaosRule.Limit
		}
		return flapBound(chaosRule.Limit, drops[ru.owner[k]], chaoskit.CutOffBound(chaosRule.Limit, 1))
	})
}

// 5. The gossip port blocked on one node (TCP and UDP, both ways) while its
// peer port stays open: the others drop it from their rings, it drops them.
func gossipBlocked(t *testing.T, im images, hold time.Duration) row {
	ru := begin(t, im, five(), chaosRule)
	c, v := ru.c, pick(5)
	c.blockPort(v, gossipPort)
	c.WaitView(c.Others(v), c.Without(v), 15*time.Second)
	c.WaitView([]int{v}, []string{c.cnodes[v].Name()}, 15*time.Second)
	ru.r.Detect = time.Since(ru.from)
	time.Sleep(hold) // the block lasts
	heal := time.Now()
	c.heal()
	c.WaitConverged(c.Names(), 30*time.Second)
	ru.r.Recover = time.Since(heal)
	ru.recovered()
	ru.r.Note = "the victim is " + c.cnodes[v].Name()
	return ru.finish([]int{v}, c.Others(), func(string) int { return ringBound(chaosRule.Limit) })
}

// 6. The peer port blocked on one node (both ways) while gossip flows:
// every ring keeps it; forwards to and from it go to the store.
func peerBlocked(t *testing.T, im images, hold time.Duration) row {
	ru := begin(t, im, five(), chaosRule)
	c, v := ru.c, pick(5)
	c.blockPort(v, rpcPort)
	during := ru.holdFault(hold, c.heal)
	ru.r.Note = fmt.Sprintf("the victim is %s; at the end of the block %s", c.cnodes[v].Name(), during)
	return ru.finish([]int{v}, c.Others(), func(string) int { return chaoskit.CutOffBound(chaosRule.Limit, 1) })
}

// 7. A node killed, then started again under the same name at a new
// address (a host that comes back with another IP).
func newIP(t *testing.T, im images, hold time.Duration) row {
	ru := begin(t, im, five(), chaosRule)
	c, v := ru.c, pick(5)
	old := c.cnodes[v].ip()
	c.kill(v)
	c.WaitView(c.Others(v), c.Without(v), 15*time.Second)
	ru.r.Detect = time.Since(ru.from)
	time.Sleep(hold) // the node stays dead
	ru.r.Recover = c.restartAt(v, c.nw.ip(firstNodeHost+50+v))
	ru.recovered()
	victim := c.cnodes[v].Name()
	ru.r.Note = fmt.Sprintf("the victim is %s, %s → %s", victim, old, c.cnodes[v].ip())
	return ru.finish([]int{v}, c.Others(v), func(k string) int {
		return chaoskit.KeyBound(chaosRule.Limit, b2i(ru.owner[k] == victim), true, 1)
	})
}

// 8, 9. The store container paused (docker pause: its process frozen,
// connections open) or killed and started again (empty). The store decides
// only for keys whose owner cannot be reached, so the peer connections to
// one node are dropped (iptables) from before the fault until after it.
func storeFault(t *testing.T, im images, hold time.Duration, kill bool) row {
	ru := begin(t, im, five(), chaosRule)
	c, v := ru.c, pick(5)
	c.cutPeersTo(v)
	if ru.l.FirstSource(time.Now(), 5*time.Second, "store") < 0 {
		t.Fatal("no store decisions with the peer links cut")
	}
	ru.from = time.Now()
	if kill {
		mustDocker(t, "kill", c.store.name)
	} else {
		mustDocker(t, "pause", c.store.name)
	}
	ru.r.Detect = ru.l.FirstSource(ru.from, hold, "fallback")
	time.Sleep(time.Until(ru.from.Add(hold))) // the store stays down
	back := time.Now()
	inc := 1
	if kill {
		mustDocker(t, "start", c.store.name)
		inc = 2
		ru.storeRestarts = 1
	} else {
		mustDocker(t, "unpause", c.store.name)
	}
	ru.r.Recover = ru.l.FirstSource(back, 15*time.Second, "store")
	if ru.r.Recover < 0 {
		t.Errorf("no store decisions within 15s of the store's return")
	}
	c.heal()
	ru.recovered()
	victim := c.cnodes[v].Name()
	ru.r.Note = fmt.Sprintf("the victim is %s, whose inbound peer connections were dropped throughout (it stayed in every ring)", victim)
	return ru.finish([]int{v}, c.Others(), func(k string) int {
		if ru.owner[k] == victim {
			return chaoskit.CutOffBound(chaosRule.Limit, inc)
		}
		return chaosRule.Limit
	})
}
