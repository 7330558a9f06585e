package failover_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/internal/valkeytest"
)

// The fault tests run a failover.Limiter over a real server and break the
// server under load.
const (
	faultTimeout  = 50 * time.Millisecond
	faultCooldown = 200 * time.Millisecond
	faultMinSpan  = 200 * time.Millisecond
	faultCallers  = 16
	// The slack a call may take beyond Timeout on this noisy 2-core machine
	// (with -race).
	faultMargin = 50 * time.Millisecond
)

var generous = ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1_000_000, Window: time.Minute}

// rig is a Limiter over a real server, with the moment its breaker last
// opened.
type rig struct {
	srv    *valkeytest.Server
	l      *failover.Limiter
	opened atomic.Int64 // UnixNano of the last change to open; 0 before
	closed atomic.Int64 // UnixNano of the last change to closed
}

func newRig(t *testing.T) *rig {
	r := &rig{srv: valkeytest.Start(t)}
	r.l = failover.New(newStore(t, r.srv), failover.Config{
		Timeout:  faultTimeout,
		Cooldown: faultCooldown,
		MinSpan:  faultMinSpan,
		OnStateChange: func(_, to failover.State) {
			switch to {
			case failover.StateOpen:
				r.opened.Store(time.Now().UnixNano())
			case failover.StateClosed:
				r.closed.Store(time.Now().UnixNano())
			}
		},
	})
	return r
}

// load is faultCallers goroutines calling AllowN until stop, each pausing
// about 1 ms between calls (some 16k calls/s in all). The pause keeps the
// two cores from being saturated, so that a call's measured latency is its
// own wait and not the time its goroutine spent descheduled behind 15 busy
// ones (a 10 ms time slice each).
type load struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	calls    atomic.Int64
	errs     atomic.Int64
	store    atomic.Int64 // decisions with Source Store
	fallback atomic.Int64
	denied   atomic.Int64 // decisions with Allowed false: none, with a limit this generous and policy Open

	mu         sync.Mutex
	maxAll     time.Duration // the slowest call
	overAll    int64         // calls over faultTimeout+faultMargin
	maxAfter   time.Duration // the slowest call started after `since`
	afterCalls int64         // calls started after `since`
	slowAfter  int64         // of those, calls that took at least faultTimeout/2
	firstErr   error
}

// startLoad starts the callers. Calls that start after since() > 0 are
// measured separately (since is read before each call).
func startLoad(l *failover.Limiter, since func() int64, lag *failover.Lag) *load {
	ld := &load{stop: make(chan struct{})}
	for i := range faultCallers {
		ld.wg.Add(1)
		go func() {
			defer ld.wg.Done()
			key := "load-" + strconv.Itoa(i)
			var maxAll, maxAfter time.Duration
			var after, slow, over int64
			defer func() {
				ld.mu.Lock()
				ld.maxAll = max(ld.maxAll, maxAll)
				ld.overAll += over
				ld.maxAfter = max(ld.maxAfter, maxAfter)
				ld.afterCalls += after
				ld.slowAfter += slow
				ld.mu.Unlock()
			}()
			for {
				select {
				case <-ld.stop:
					return
				case <-time.After(time.Millisecond): // pacing, not waiting for an event
				}
				s := since()
				// A caller's deadline far beyond Timeout: were the Limiter's
				// own bound broken, calls would fail instead of hanging.
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				start := time.Now()
				d, err := l.AllowN(cctx, key, generous, 1)
				end := time.Now()
				cancel()
				// A call's time, less what this process spent descheduled
				// (beside busy loops one took 183 ms, of a 50 ms timeout).
				took := end.Sub(start) - lag.StalledSince(start, end)
				ld.calls.Add(1)
				maxAll = max(maxAll, took)
				if took > faultTimeout+faultMargin {
					over++
				}
				if s != 0 && start.UnixNano() > s {
					maxAfter = max(maxAfter, took)
					after++
					if took >= faultTimeout/2 {
						slow++
					}
				}
				if err == nil && !d.Allowed {
					ld.denied.Add(1)
				}
				switch {
				case err != nil:
					if ld.errs.Add(1) == 1 {
						ld.mu.Lock()
						ld.firstErr = err
						ld.mu.Unlock()
					}
				case d.Source == ringlimit.Store:
					ld.store.Add(1)
				case d.Source == ringlimit.Fallback:
					ld.fallback.Add(1)
				}
			}
		}()
	}
	return ld
}

func (ld *load) halt() {
	close(ld.stop)
	ld.wg.Wait()
}

// The server is killed under load: no caller sees an error, the breaker
// opens, and once it is open no call waits for the dead server (probes
// included: a dead server refuses at once).
func TestKillServerUnderLoad(t *testing.T) {
	r := newRig(t)
	ld := startLoad(r.l, r.opened.Load, stalls(t))
	defer ld.halt()
	if !eventually(5*time.Second, func() bool { return ld.store.Load() >= 500 }) {
		t.Fatalf("only %d store decisions within 5s", ld.store.Load())
	}
	killed := time.Now()
	r.srv.Kill()
	if !eventually(5*time.Second, func() bool { return r.opened.Load() != 0 }) {
		t.Fatalf("breaker not open within 5s of the kill; stats %+v", r.l.Stats())
	}
	toOpen := time.Unix(0, r.opened.Load()).Sub(killed)
	atOpen := r.l.Stats()
	// Run on through several cooldowns, so that failed probes reopen it.
	if !eventually(5*time.Second, func() bool { return r.l.Stats().Opens >= 4 }) {
		t.Fatalf("breaker did not probe and reopen 3 times within 5s; stats %+v", r.l.Stats())
	}
	ld.halt()
	ld.stop = make(chan struct{}) // the deferred halt has nothing left to stop
	st := r.l.Stats()
	t.Logf("kill: open %s after the kill; %d calls (%d store, %d fallback), %d after open, slowest after open %s, slowest overall %s; stats %+v",
		toOpen, ld.calls.Load(), ld.store.Load(), ld.fallback.Load(), ld.afterCalls, ld.maxAfter, ld.maxAll, st)
	if n := ld.errs.Load(); n != 0 {
		t.Fatalf("%d callers got errors, want none; first: %v", n, ld.firstErr)
	}
	if n := ld.denied.Load(); n != 0 {
		t.Fatalf("%d calls denied, want none (policy Open)", n)
	}
	if ld.afterCalls < 100 {
		t.Fatalf("only %d calls after the breaker opened", ld.afterCalls)
	}
	// Once open, no call waits for the dead server: the breaker refuses, and
	// its probes find the server refusing at once. (Counted, not timed: on
	// a busy machine a refused call may still take a time slice or two.)
	if n := st.Timeouts - atOpen.Timeouts; n != 0 {
		t.Fatalf("%d calls timed out after the breaker opened, want none", n)
	}
	// And only the probes reach it: one a cooldown, and the calls that
	// were on their way when it opened.
	if n, probes := st.PrimaryErrors-atOpen.PrimaryErrors, st.Opens-atOpen.Opens; n > probes+faultCallers {
		t.Fatalf("%d calls reached the dead server after the breaker opened; want at most its %d probes and %d calls in flight", n, probes, faultCallers)
	}
	checkBound(t, ld)
}

// The server hangs (SIGSTOP) under load: every call returns within Timeout
// (plus scheduling slack), the breaker opens, goroutines do not pile up; the
// server resumes and the breaker closes after the cooldown.
func TestHangServerUnderLoad(t *testing.T) {
	r := newRig(t)
	ld := startLoad(r.l, r.opened.Load, stalls(t))
	defer ld.halt()
	if !eventually(5*time.Second, func() bool { return ld.store.Load() >= 500 }) {
		t.Fatalf("only %d store decisions within 5s", ld.store.Load())
	}
	base := runtime.NumGoroutine() // callers and the client's own, in their steady state
	paused := time.Now()
	r.srv.Pause()
	if !eventually(5*time.Second, func() bool { return r.opened.Load() != 0 }) {
		t.Fatalf("breaker not open within 5s of the hang; stats %+v", r.l.Stats())
	}
	toOpen := time.Unix(0, r.opened.Load()).Sub(paused)
	// Hang through several cooldowns: each probe waits Timeout and reopens.
	peak := 0
	if !eventually(5*time.Second, func() bool {
		peak = max(peak, runtime.NumGoroutine())
		return r.l.Stats().Opens >= 4
	}) {
		t.Fatalf("breaker did not probe and reopen 3 times within 5s; stats %+v", r.l.Stats())
	}
	hung := r.l.Stats()
	resumed := time.Now()
	r.srv.Resume()
	if !eventually(5*time.Second, func() bool { return r.closed.Load() > resumed.UnixNano() }) {
		t.Fatalf("breaker not closed within 5s of the resume; stats %+v", r.l.Stats())
	}
	toClose := time.Unix(0, r.closed.Load()).Sub(resumed)
	storeBefore := ld.store.Load()
	if !eventually(5*time.Second, func() bool { return ld.store.Load() > storeBefore+100 }) {
		t.Fatal("no store decisions after the breaker closed")
	}
	settled := 0
	if !eventually(5*time.Second, func() bool {
		settled = runtime.NumGoroutine()
		return settled <= base+2
	}) {
		t.Fatalf("goroutines did not settle: %d, baseline %d", settled, base)
	}
	ld.halt()
	ld.stop = make(chan struct{})
	t.Logf("hang: open %s after SIGSTOP; slowest call %s (after open %s, %d calls, %d of them slow: probes); closed %s after SIGCONT; goroutines base %d, peak %d, settled %d; stats while hung %+v",
		toOpen, ld.maxAll, ld.maxAfter, ld.afterCalls, ld.slowAfter, toClose, base, peak, settled, hung)
	if n := ld.errs.Load(); n != 0 {
		t.Fatalf("%d callers got errors, want none; first: %v", n, ld.firstErr)
	}
	if n := ld.denied.Load(); n != 0 {
		t.Fatalf("%d calls denied, want none (policy Open)", n)
	}
	checkBound(t, ld)
	// After the breaker opened, only the probes (one per cooldown, each
	// reopening it) wait for the hung server. A caller that is merely
	// descheduled for 25 ms on a loaded 2-core machine looks the same by
	// the clock, so allow 1% of the calls and two more for that.
	probes := int64(r.l.Stats().Opens) - 1
	if allowed := probes + ld.afterCalls/100 + 2; ld.slowAfter > allowed {
		t.Fatalf("%d of %d calls after the breaker opened waited ≥ %s; only the %d probes (+ %d for scheduling) may",
			ld.slowAfter, ld.afterCalls, faultTimeout/2, probes, allowed-probes)
	}
	if hung.Timeouts < 5 {
		t.Fatalf("%d timeouts while hung, want at least MaxFailures", hung.Timeouts)
	}
	// What a hang may leave behind, each call waiting for its reply until
	// the server resumes: those that timed out before the breaker opened
	// (per caller: the few while the shared timeout backs off from the
	// floor to the ceiling, log2(50/10) < 3, then one per ceiling over
	// MinSpan, and the one that opens it), and one per probe.
	if bound := base + faultCallers*(int(faultMinSpan/faultTimeout)+4) + int(probes); peak > bound {
		t.Fatalf("goroutines piled up during the hang: peak %d, baseline %d, bound %d", peak, base, bound)
	}
	if toClose > faultCooldown+time.Second {
		t.Fatalf("closed %s after the resume, want about the cooldown %s", toClose, faultCooldown)
	}
}

// The server restarts (empty, script cache gone): the breaker closes and
// decisions come from the store again.
func TestRestartServer(t *testing.T) {
	r := newRig(t)
	// Healthy: the store decides. (The first call dials and loads the
	// scripts, which can outlast the 50 ms timeout on a busy machine: it
	// falls back, as it should.)
	var first ringlimit.Decision
	if !eventually(5*time.Second, func() bool {
		d, err := r.l.AllowN(ctx, "k", generous, 1)
		if err != nil {
			t.Fatalf("healthy: %v", err)
		}
		first = d
		return d.Source == ringlimit.Store
	}) {
		t.Fatalf("healthy: no store decision within 5s; last %+v", first)
	}
	r.srv.Kill()
	if !eventually(5*time.Second, func() bool {
		d, err := r.l.AllowN(ctx, "k", generous, 1)
		if err != nil || d.Source == ringlimit.Store {
			t.Fatalf("with the server dead: %+v, %v; want a fallback", d, err)
		}
		return r.l.State() == failover.StateOpen
	}) {
		t.Fatalf("breaker not open within 5s of the kill; stats %+v", r.l.Stats())
	}
	restarted := time.Now()
	r.srv.Restart()
	var d ringlimit.Decision
	if !eventually(5*time.Second, func() bool {
		var err error
		if d, err = r.l.AllowN(ctx, "k", generous, 1); err != nil {
			t.Fatalf("after the restart: %v", err)
		}
		return d.Source == ringlimit.Store
	}) {
		t.Fatalf("no store decision within 5s of the restart; stats %+v", r.l.Stats())
	}
	took := time.Since(restarted)
	if s := r.l.State(); s != failover.StateClosed {
		t.Fatalf("after a store decision the breaker is %s, want closed", s)
	}
	// The restarted server is empty: the key starts afresh.
	if d.Remaining != generous.Limit-1 {
		t.Fatalf("first decision after the restart: %+v, want a fresh key", d)
	}
	t.Logf("restart: store decisions again %s after the restart began; stats %+v", took, r.l.Stats())
}

// checkBound checks that Timeout bounded the calls of ld. No call may come
// near the callers' 2 s deadline: were the bound broken, that is where they
// would end. Past Timeout and its margin, less the time this process was
// seen descheduled, only a few may go: 1 % of the calls and two more. (A
// goroutine can wait for a CPU while the one that measures the stalls
// runs: beside busy loops and other work, load average 23, one call of
// 4,723 took 130 ms so.)
func checkBound(t *testing.T, ld *load) {
	t.Helper()
	if ld.maxAll >= time.Second {
		t.Fatalf("a call took %s, over Timeout %s: the bound did not hold", ld.maxAll, faultTimeout)
	}
	calls := ld.calls.Load()
	if allowed := calls/100 + 2; ld.overAll > allowed {
		t.Fatalf("%d of %d calls took over Timeout %s + %s (the slowest %s); want at most %d", ld.overAll, calls, faultTimeout, faultMargin, ld.maxAll, allowed)
	}
}
