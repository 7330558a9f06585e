package node

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/ring"
)

var _ ringlimit.MultiLimiter = (*Node)(nil)

// AllowAll applies every rule to key at once, all or nothing (see
// ringlimit.MultiLimiter), down the same chain as AllowN: the key's owner
// decides all of its states in one call to its memory (this node: one local
// call; a peer: one round trip, the whole call in one request), else the
// store in one script run, else the policy for every rule. It counts as one
// decision in Stats and in the metrics (with the Source and, for the
// result, the binding Decision: see ringlimit.Binding). It allocates its
// result slice and nothing else when this node owns the key. Errors are as
// for AllowN.
func (n *Node) AllowAll(ctx context.Context, key string, rules []ringlimit.Rule, hits int64) (ds []ringlimit.Decision, err error) {
	var start time.Time
	if n.obs.on.Load() { // metrics: time a sample (observe.go)
		start = n.obs.start()
	}
	if n.closed.Load() {
		return nil, ringlimit.ErrClosed
	}
	if len(rules) == 0 || len(rules) > ringlimit.MaxRules {
		return nil, ringlimit.ValidateRules(rules)
	}
	now, h, r := n.now(), ring.Hash(key), n.members.Ring()
	at := r.OwnerOfHash(h)
	if at == n.name && n.holders.leaving.Load() == nil {
		// Here, as in AllowN (no stray check either): the local store
		// checks the input.
		var ok bool
		if ds, ok, err = n.local.AllowAllIfAt(now, key, h, rules, hits, n.quiet); err != nil {
			return nil, err
		}
		if ok {
			n.observeAll(ctx, start, &ds, &err)
			return ds, nil
		}
	}
	for i, r := range rules { // ValidateCall validates each rule too
		if err := ringlimit.ValidateCall(key, r, hits); err != nil {
			return nil, fmt.Errorf("rules[%d]: %w", i, err)
		}
	}
	if _, err = n.route(ctx, now, r, at, peer.Request{Op: peer.OpAllowAll, Key: key, Rules: rules, N: hits}, &ds); err != nil {
		return nil, err
	}
	n.observeAll(ctx, start, &ds, &err)
	return ds, nil
}

// decideAll decides an OpAllowAll on local state: settled, at once; else
// only if the key holds a state here (see decideHereAll).
func (n *Node) decideAll(req *peer.Request, now time.Time, settled bool, all *[]ringlimit.Decision) (ringlimit.Decision, bool, error) {
	var ds []ringlimit.Decision
	var err error
	held := true
	if settled {
		ds, err = n.local.AllowAllAt(now, req.Key, req.Rules, req.N)
	} else {
		ds, held, err = n.local.AllowAllHeldAt(now, req.Key, req.Rules, req.N)
	}
	if err != nil || !held {
		return ringlimit.Decision{}, held, err
	}
	*all = ds
	return ds[0], true, nil
}

// storeAll decides an OpAllowAll in the store tier.
func (n *Node) storeAll(ctx context.Context, req *peer.Request, all *[]ringlimit.Decision) (ringlimit.Decision, error) {
	ds, err := n.store.AllowAll(ctx, req.Key, req.Rules, req.N)
	if err != nil {
		return ringlimit.Decision{}, err
	}
	*all = ds
	return ds[0], nil
}

// observeAll counts one AllowAll as one decision: its Source, and the
// binding Decision's result.
func (n *Node) observeAll(ctx context.Context, start time.Time, ds *[]ringlimit.Decision, err *error) {
	if *err != nil || len(*ds) == 0 {
		return
	}
	d := ringlimit.Binding(*ds)
	n.observe(ctx, start, &d, err)
}
