package node

import (
	"context"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/peer"
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
//
// AllowAll is shorthand for AppendAll(ctx, nil, key, rules, hits).
func (n *Node) AllowAll(ctx context.Context, key string, rules []ringlimit.Rule, hits int64) ([]ringlimit.Decision, error) {
	return n.AppendAll(ctx, nil, key, rules, hits)
}

// AppendAll is AllowAll, appending the decisions to dst and returning the
// extended slice (on an error, dst as it was). With room for them in dst it
// allocates nothing when this node owns the key: a caller that holds the
// *Node can pass a buffer on its stack (var buf
// [ringlimit.MaxRules]ringlimit.Decision; ds, err := n.AppendAll(ctx,
// buf[:0], key, rules, 1)). Through an interface the buffer escapes to the
// heap, so keep one instead. The result's allocation costs about as much as
// an owned AllowN (see BenchmarkAllowAllSideBySide).
func (n *Node) AppendAll(ctx context.Context, dst []ringlimit.Decision, key string, rules []ringlimit.Rule, hits int64) ([]ringlimit.Decision, error) {
	return n.call(ctx, new(ringlimit.Decision), &peer.Request{Op: peer.OpAllowAll, Key: key, Rules: rules, N: hits}, dst)
}

// storeAll decides an OpAllowAll in the store tier.
func (n *Node) storeAll(ctx context.Context, req *peer.Request, x *extra) (ringlimit.Decision, error) {
	ds, err := n.store.AllowAll(ctx, req.Key, req.Rules, req.N)
	if err != nil {
		return ringlimit.Decision{}, err
	}
	x.all = ds
	return ds[0], nil
}

// observeAll counts one AllowAll that returned ds as one decision: its
// Source (every rule's), and the binding Decision's result (a denial if any
// rule denied; see ringlimit.Binding).
func (n *Node) observeAll(ctx context.Context, start time.Time, ds []ringlimit.Decision) {
	if len(ds) == 0 {
		return
	}
	d := ringlimit.Decision{Allowed: true, Source: ds[0].Source}
	for i := range ds {
		d.Allowed = d.Allowed && ds[i].Allowed
	}
	var err error
	n.observe(ctx, start, &d, &err)
}
