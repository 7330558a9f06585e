package rls

import (
	"context"
	"slices"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ringlimit/ringlimit"
)

// decide decides every limited item, all or nothing, and reports whether
// the request is admitted. deny is the domain's failure_mode_deny: a
// decision of the fallback policy (neither owner nor store answered) then
// refuses.
func (s *Service) decide(ctx context.Context, items []item, deny bool) (bool, error) {
	var blocking, shadow []int
	refused := false
	for i := range items {
		it := &items[i]
		if it.key == "" {
			continue
		}
		if it.lim.ShadowMode || it.lim.QuotaMode {
			shadow = append(shadow, i)
			continue
		}
		blocking = append(blocking, i)
		if !fits(it) {
			it.code = pb.RateLimitResponse_OVER_LIMIT
			refused = true
		}
	}
	// A lone limited descriptor's charge is all or nothing by itself.
	// Several are peeked first, so that a request one of them refuses
	// charges nothing.
	if refused || len(blocking) > 1 {
		for _, i := range blocking {
			it := &items[i]
			if it.code == pb.RateLimitResponse_OVER_LIMIT {
				continue
			}
			d, err := s.lim.Peek(ctx, it.key, it.lim.Rule)
			if err != nil {
				return false, err
			}
			it.d, it.decided = d, true
			if !d.Allowed || d.Remaining < it.hits || (deny && d.Source == ringlimit.Fallback) {
				it.code = pb.RateLimitResponse_OVER_LIMIT
				it.d.Remaining = 0
				refused = true
			}
		}
	}
	if !refused {
		// The charges whose give-back needs the most luck go last: a leaky
		// bucket's comes back only if no hit queued behind it, a log's
		// only from its newest instant (see node.GiveBack). The last
		// charge is never given back: a refusal there charged nothing.
		slices.SortStableFunc(blocking, func(i, j int) int { return lateGiver(items[i].lim.Rule) - lateGiver(items[j].lim.Rule) })
		for k, i := range blocking {
			it := &items[i]
			it.at = s.now()
			d, err := s.lim.AllowN(ctx, it.key, it.lim.Rule, it.hits)
			if err != nil {
				s.giveBack(ctx, items, blocking[:k])
				return false, err
			}
			it.d, it.decided = d, true
			if d.Allowed && !(deny && d.Source == ringlimit.Fallback) {
				it.charged = true
				continue
			}
			it.code = pb.RateLimitResponse_OVER_LIMIT
			refused = true
			s.giveBack(ctx, items, blocking[:k])
			break
		}
	}
	for _, i := range blocking {
		it := &items[i]
		it.obs = "ok"
		if it.code == pb.RateLimitResponse_OVER_LIMIT {
			it.obs = "over_limit"
		}
	}
	// Shadow-mode and quota-mode descriptors never refuse: they are
	// charged with an admitted request and only peeked with a refused one,
	// and a would-be refusal is counted (and, for a quota, reported in the
	// response's metadata), not answered.
	for _, i := range shadow {
		it := &items[i]
		it.obs = "ok"
		overCode := "shadow_over_limit"
		if it.lim.QuotaMode {
			overCode = "quota_over_limit"
		}
		if !fits(it) {
			it.obs, it.over = overCode, true
			continue
		}
		var d ringlimit.Decision
		var err error
		if refused {
			d, err = s.lim.Peek(ctx, it.key, it.lim.Rule)
			if err == nil && (!d.Allowed || d.Remaining < it.hits) {
				it.obs, it.over, d.Allowed, d.Remaining = overCode, true, false, 0
			}
		} else {
			d, err = s.lim.AllowN(ctx, it.key, it.lim.Rule, it.hits)
			it.charged = err == nil && d.Allowed
			if err == nil && !d.Allowed {
				it.obs, it.over, d.Remaining = overCode, true, 0
			}
		}
		if err != nil {
			return false, err
		}
		it.d, it.decided = d, true
	}
	return !refused, nil
}

// lateGiver is 1 for the algorithms whose charges are the hardest to give
// back, 0 for the others.
func lateGiver(r ringlimit.Rule) int {
	if r.Algorithm == ringlimit.LeakyBucket || r.Algorithm == ringlimit.SlidingLog {
		return 1
	}
	return 0
}

// fits reports whether the item's hits can ever pass its rule: a limit of
// 0, or hits above the rule's capacity, never do.
func fits(it *item) bool {
	return it.lim.Rule.Limit > 0 && it.hits <= it.lim.Rule.Capacity()
}

// giveBack gives back the hits charged for items[idx], where the Limiter
// can.
func (s *Service) giveBack(ctx context.Context, items []item, idx []int) {
	g, ok := s.lim.(Giver)
	if !ok {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, i := range idx {
		it := &items[i]
		if it.charged && g.GiveBack(ctx, it.key, it.lim.Rule, it.hits, it.d, it.at) == nil {
			it.d.Remaining += it.hits
		}
	}
}
