package node_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/peer"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// A rule with a window no node can carry (the demo's ?window=1752000h,
// about 200 years; issue 28) is refused at once with ErrInvalidRule, through
// AllowN and AllowAll, and the legitimate calls forwarded beside it on the
// same peer connection are all decided by the owner: none breaks the link,
// none falls to the store or the policy. Before the shared bound, such a
// rule validated, its frame closed the owner's connection, and the calls in
// flight on it fell back (1,836 of 1,863 in the second).
func TestUnforwardableRuleKeepsThePeerLink(t *testing.T) {
	c := nodetest.Start(t, 2, func(cfg *node.Config) {
		cfg.ForwardTimeout = 5 * time.Second
		cfg.LeaseHot = -1 // every call forwarded: the good rule's token bucket, far under its limit, would lease
	})
	a, o := c.Nodes[0], c.Nodes[1]
	keys := keysOwnedBy(a, o.Name(), 32)
	awaitPeerDecision(t, a, keys[0])
	good := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	bad := ringlimit.Rule{Limit: 1, Window: 1752000 * time.Hour}
	before := a.Stats()

	const callers, calls, badCalls = 8, 200, 50
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		elsewhere []ringlimit.Decision
		errs      []error
	)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				d, err := a.Allow(ctx, keys[(g*calls+i)%len(keys)], good)
				if err != nil || d.Source != ringlimit.Peer {
					mu.Lock()
					elsewhere, errs = append(elsewhere, d), append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the bad rule, among them, on keys the same owner owns
		defer wg.Done()
		for i := range badCalls {
			k := keys[i%len(keys)]
			var err error
			if i%2 == 0 {
				_, err = a.AllowN(ctx, k, bad, 1)
			} else {
				_, err = a.AllowAll(ctx, k, []ringlimit.Rule{good, bad}, 1)
			}
			if !errors.Is(err, ringlimit.ErrInvalidRule) {
				mu.Lock()
				errs = append(errs, err)
				elsewhere = append(elsewhere, ringlimit.Decision{})
				mu.Unlock()
			}
		}
	}()
	wg.Wait()

	st, so := a.Stats(), o.Stats()
	if len(elsewhere) > 0 {
		t.Fatalf("%d calls not decided by the owner or not refused (first: %+v, %v); caller %+v", len(elsewhere), elsewhere[0], errs[0], st)
	}
	if st.ForwardFailures != before.ForwardFailures || so.Peer.RejectedFrames != 0 || st.Peer.RejectedFrames != 0 {
		t.Fatalf("the peer link suffered: forward failures %d → %d, rejected frames %d (owner), %d (caller)",
			before.ForwardFailures, st.ForwardFailures, so.Peer.RejectedFrames, st.Peer.RejectedFrames)
	}
	if got := st.Decisions[ringlimit.Peer] - before.Decisions[ringlimit.Peer]; got != callers*calls {
		t.Fatalf("%d decisions by the owner, want %d", got, callers*calls)
	}
}

// A node of an earlier release, whose Validate let such a window pass,
// forwards it to a node of this one on the connection that carries its
// other calls: the owner answers that call with ErrInvalidRule, and the
// calls beside it on the connection are decided as usual. (A peer.Client
// sends what it is given, as the earlier node did.)
func TestOwnerAnswersAnOldPeersBadWindow(t *testing.T) {
	c := nodetest.Start(t, 1, nil)
	o := c.Nodes[0]
	cl := peer.NewClient(peer.ClientConfig{Addr: o.RPCAddr(), Name: o.Name(), Secret: nodetest.Secret(), Timeout: 5 * time.Second})
	defer cl.Close()
	good := ringlimit.Rule{Limit: 1 << 40, Window: time.Second}
	bad := ringlimit.Rule{Limit: 1, Window: 1752000 * time.Hour}
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				req := peer.Request{Op: peer.OpAllow, Key: fmt.Sprint("k", g, i), Rule: good, N: 1}
				wantBad := i%10 == 0
				switch {
				case wantBad && g%2 == 0:
					req.Rule = bad
				case wantBad:
					req = peer.Request{Op: peer.OpAllowAll, Key: req.Key, Rules: []ringlimit.Rule{good, bad}, N: 1}
				}
				res, err := cl.Do(ctx, &req)
				switch {
				case err != nil:
					errs <- err
				case wantBad && !errors.Is(res.Err, ringlimit.ErrInvalidRule):
					errs <- fmt.Errorf("bad window %+v: %+v, want ErrInvalidRule", req, res)
				case !wantBad && (res.Err != nil || !res.Decision.Allowed):
					errs <- fmt.Errorf("%+v beside bad calls: %+v", req, res)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := o.Stats().Peer; st.RejectedFrames != 0 || st.Conns != 1 || cl.Stats().RejectedFrames != 0 {
		t.Fatalf("the connection suffered: owner %+v, client %+v", st, cl.Stats())
	}
	if st := o.Stats().Peer; st.BadCalls == 0 {
		t.Fatalf("Stats().Peer.BadCalls = 0 after bad calls were answered: %+v", st)
	}
}
