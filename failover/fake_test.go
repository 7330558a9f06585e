package failover_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
)

// fake is a primary whose behaviour a test sets: it answers, fails with err,
// hangs until its context is done, or panics. It counts the calls it gets.
type fake struct {
	mode  atomic.Int32
	err   atomic.Pointer[error]
	calls atomic.Int64
	// delay is the injected latency of an answer (or of a failure);
	// onCall, if set before the first call, runs at the start of each.
	delay  atomic.Int64
	onCall func()
}

const (
	answer int32 = iota // Allowed, Source Store
	fail                // return the set error
	hang                // block until ctx is done, return ctx.Err()
	panics
)

var errStoreDown = errors.New("fake: store down")

func newFake() *fake { return new(fake) }

func (f *fake) set(mode int32)     { f.mode.Store(mode) }
func (f *fake) failWith(err error) { f.err.Store(&err); f.mode.Store(fail) }

func (f *fake) do(ctx context.Context, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	f.calls.Add(1)
	if f.onCall != nil {
		f.onCall()
	}
	if d := time.Duration(f.delay.Load()); d > 0 {
		t := time.NewTimer(d) // the primary's injected latency, not a wait of the test
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ringlimit.Decision{}, ctx.Err()
		}
	}
	switch f.mode.Load() {
	case fail:
		if p := f.err.Load(); p != nil {
			return ringlimit.Decision{}, *p
		}
		return ringlimit.Decision{}, errStoreDown
	case hang:
		<-ctx.Done()
		return ringlimit.Decision{}, ctx.Err()
	case panics:
		panic("fake: boom")
	}
	return ringlimit.Decision{Allowed: true, Limit: rule.Limit, Remaining: rule.Capacity() - n, Source: ringlimit.Store}, nil
}

func (f *fake) AllowN(ctx context.Context, _ string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	return f.do(ctx, rule, n)
}

func (f *fake) Peek(ctx context.Context, _ string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	return f.do(ctx, rule, 0)
}

func (f *fake) Reset(ctx context.Context, _ string) error {
	_, err := f.do(ctx, ringlimit.Rule{Limit: 1}, 0)
	return err
}

// eventually polls cond every millisecond until it holds or d has passed.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond) // a polling interval, not a wait for an event
	}
}

// stalls measures how long this process is descheduled while a test runs
// (a failover.Lag, fed every millisecond), so that a test of a time bound
// takes out of a call's measured time what the process did not run: on two
// cores beside busy loops a goroutine that has its answer may wait 100 ms
// and more for a CPU, and no code of the Limiter runs meanwhile. It stops
// when the test ends.
func stalls(t *testing.T) *failover.Lag {
	t.Helper()
	lag := &failover.Lag{}
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		lag.Run(lctx, time.Millisecond)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return lag
}
