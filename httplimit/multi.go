package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/rules"
)

// ErrNoMulti is returned (and handled as a limiter error) when a rule has
// several limits and the Limiter is not a ringlimit.MultiLimiter. Every
// Limiter of this module is one.
var ErrNoMulti = fmt.Errorf("%w: httplimit: the limiter cannot apply several limits at once", ringlimit.ErrInvalidRule)

// applyRule takes one hit from rl for r: from its own limits, or from the
// override that applies (none, for an unlimited one). Several limits are
// applied all or nothing with AllowAll. It appends one applied per limit to
// res and reports whether any denied.
func (m *Middleware) applyRule(ctx context.Context, r *http.Request, rl *rules.Rule, res []applied) ([]applied, bool, error) {
	key, err := m.specKey(rl, r)
	if err != nil {
		return res, false, err
	}
	limits := rl.Limits
	if len(limits) == 0 { // a Rule built without NewSet
		limits = []ringlimit.Rule{rl.Rule}
	}
	if len(rl.Overrides) > 0 {
		value := key[len(rl.Name)+1:]
		if i := rl.OverrideFor(r, value); i >= 0 {
			o := &rl.Overrides[i]
			if o.Unlimited {
				return res, false, nil
			}
			limits, key = o.Limits, overrideKey(rl.Name, i, value)
		}
	}
	if len(limits) == 1 {
		d, err := m.limiter.AllowN(ctx, key, limits[0], 1)
		if err != nil {
			return res, false, err
		}
		if !d.Allowed && !rl.Shadow && !m.shadow {
			d = m.queue(ctx, key, limits[0], d)
		}
		return append(res, applied{name: rl.Name, rule: limits[0], d: d, shadow: rl.Shadow, of: 1}), !d.Allowed, nil
	}
	ml, ok := m.limiter.(ringlimit.MultiLimiter)
	if !ok {
		return res, false, ErrNoMulti
	}
	ds, err := ml.AllowAll(ctx, key, limits, 1)
	if err != nil {
		return res, false, err
	}
	denied := false
	for i, d := range ds {
		a := applied{name: limitName(rl.Name, i), rule: limits[i], d: d, shadow: rl.Shadow}
		if i == 0 {
			a.of = len(ds)
		}
		res = append(res, a)
		denied = denied || !d.Allowed
	}
	return res, denied, nil
}

// limitName names the i'th limit of a rule in the RateLimit headers: the
// rule's name for the first, "name#i" for the others.
func limitName(name string, i int) string {
	if i == 0 {
		return name
	}
	return name + "#" + strconv.Itoa(i)
}
