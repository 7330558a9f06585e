package failover_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/multitest"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
)

// AllowAll makes the fake a ringlimit.MultiLimiter: one call, answered as
// AllowN answers each rule.
func (f *fake) AllowAll(ctx context.Context, _ string, rules []ringlimit.Rule, n int64) ([]ringlimit.Decision, error) {
	ds := make([]ringlimit.Decision, len(rules))
	for i, r := range rules {
		d, err := f.do(ctx, r, n) // counts a call: the first is the one
		if err != nil {
			return nil, err
		}
		if i > 0 {
			f.calls.Add(-1)
		}
		ds[i] = d
	}
	return ds, nil
}

// The contract through a healthy breaker to a real store.
func TestAllowAllContractThroughTheStore(t *testing.T) {
	srv := valkeytest.Start(t)
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	runs := 0
	multitest.Run(t, "", func(_ *testing.T, clk ringlimit.Clock) multitest.Limiter {
		runs++
		return failover.New(remote.New(c, remote.Config{Prefix: fmt.Sprintf("f%d:", runs), Clock: clk}), failover.Config{Timeout: 5 * time.Second})
	})
}

// The contract on the LocalShare fallback (no primary; one node, so the
// share is the whole rule): the local limiter's AllowAll, all or nothing.
func TestAllowAllContractOnLocalShare(t *testing.T) {
	multitest.Run(t, "", func(_ *testing.T, clk ringlimit.Clock) multitest.Limiter {
		return failover.New(nil, failover.Config{Policy: failover.LocalShare, Local: local.New(local.Config{Clock: clk})})
	})
}

func TestAllowAllPolicies(t *testing.T) {
	rules := []ringlimit.Rule{perMin30, bucket}
	for _, p := range []failover.Policy{failover.Open, failover.Closed, failover.LocalShare} {
		t.Run(p.String(), func(t *testing.T) {
			f := newFake()
			l := failover.New(f, failover.Config{MaxFailures: 3, Cooldown: time.Hour, Policy: p,
				Local: local.New(local.Config{}), Share: func() int { return 2 }})
			f.set(fail)
			for i := range 3 { // each AllowAll is one failure: three open the breaker
				if l.State() != failover.StateClosed {
					t.Fatalf("breaker %s after %d failed AllowAll calls", l.State(), i)
				}
				if _, err := l.AllowAll(ctx, "k", rules, 2); err != nil {
					t.Fatal(err)
				}
			}
			if l.State() != failover.StateOpen || f.calls.Load() != 3 {
				t.Fatalf("after 3 failed AllowAll calls: breaker %s, %d primary calls", l.State(), f.calls.Load())
			}
			ds, err := l.AllowAll(ctx, "k", rules, 2)
			if err != nil || len(ds) != 2 {
				t.Fatal(ds, err)
			}
			for i, d := range ds {
				if d.Source != ringlimit.Fallback {
					t.Errorf("rule %d: source %s", i, d.Source)
				}
				switch p {
				case failover.Open:
					if !d.Allowed || d.Remaining != rules[i].Capacity()-2 {
						t.Errorf("rule %d: %+v, want Open's", i, d)
					}
				case failover.Closed:
					if d.Allowed || d.RetryAfter != time.Hour {
						t.Errorf("rule %d: %+v, want Closed's", i, d)
					}
				case failover.LocalShare: // half of each rule, 4 hits taken (2 per fallback call)
					if want := (rules[i].Capacity()+1)/2 - 8; !d.Allowed || d.Limit != (rules[i].Limit+1)/2 || d.Remaining != want {
						t.Errorf("rule %d: %+v, want the share's with %d left", i, d, want)
					}
				}
			}
			st := l.Stats()
			if got := st.FallbackOpen + st.FallbackClosed + st.FallbackLocalShare; got != 4 {
				t.Fatalf("%d fallbacks counted for 4 AllowAll calls: %+v", got, st)
			}
		})
	}
}

func TestAllowAllHealthyIsOnePrimaryCall(t *testing.T) {
	f := newFake()
	l := failover.New(f, failover.Config{})
	ds, err := l.AllowAll(ctx, "k", []ringlimit.Rule{perMin30, bucket}, 3)
	if err != nil || len(ds) != 2 || ds[0].Source != ringlimit.Store || ds[1].Remaining != 17 {
		t.Fatalf("AllowAll = %+v, %v; want the primary's decisions", ds, err)
	}
	if got := f.calls.Load(); got != 1 {
		t.Fatalf("%d primary calls, want 1", got)
	}
}

func TestAllowAllBadInputAndUnsupported(t *testing.T) {
	f := newFake()
	l := failover.New(f, failover.Config{})
	nine := make([]ringlimit.Rule, 9)
	for i := range nine {
		nine[i] = perMin30
	}
	if _, err := l.AllowAll(ctx, "k", nine, 1); !errors.Is(err, ringlimit.ErrInvalidRule) {
		t.Fatalf("nine rules: %v", err)
	}
	if _, err := l.AllowAll(ctx, "k", []ringlimit.Rule{perMin30, bucket}, 21); !errors.Is(err, ringlimit.ErrInvalidHits) {
		t.Fatalf("n over the second rule's capacity: %v", err)
	}
	if f.calls.Load() != 0 {
		t.Fatal("bad input reached the primary")
	}
	if _, err := failover.New(nop{}, failover.Config{}).AllowAll(ctx, "k", []ringlimit.Rule{perMin30}, 1); !errors.Is(err, failover.ErrNoAllowAll) {
		t.Fatalf("primary without AllowAll: %v", err)
	}
}
