package failover

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/logsum"
)

// DefaultTimeout bounds each call to the primary when Config.Timeout is zero.
const DefaultTimeout = 50 * time.Millisecond

// Config configures a Limiter. The zero Config is valid: 50 ms per call, open
// after 5 consecutive failures, a probe after 1 s, and the Open policy.
type Config struct {
	// Timeout is the ceiling of each call's timeout, whatever the caller's
	// own deadline (a shorter caller deadline still applies). With a Lag,
	// each call waits for the primary (or its shard) the timeout an RTO
	// estimates from the latencies it has shown: SRTT + 4·RTTVAR, at least
	// Floor plus the lag this process's timers show lately, at most
	// Timeout; the ceiling until the first answer. Time this process spent
	// descheduled during a call does not count against the primary (see
	// Lag.Extend). Without a Lag nothing tells this process's stalls from
	// the primary's, and every call waits Timeout. If zero or negative,
	// DefaultTimeout (50 ms).
	Timeout time.Duration
	// Floor is the least effective timeout (before the lag is added). If
	// zero or negative, DefaultFloor (50 ms).
	Floor time.Duration
	// Lag measures this process's scheduling lag (its Run feeds it); with
	// it the timeouts follow the measured latencies (see Timeout). If nil,
	// every call waits Timeout.
	Lag *Lag
	// MinSpan is how long a run of timeouts must last to open the breaker
	// (BreakerConfig.MinSpan). If zero, DefaultMinSpan (500 ms).
	MinSpan time.Duration
	// MaxFailures is the number of consecutive failed primary calls that
	// opens the breaker, and the least number of consecutive timeouts that
	// does if they span MinSpan (see Breaker). If zero or negative, 5.
	MaxFailures int
	// Cooldown is how long the breaker stays open before one probe call goes
	// to the primary; it is also the RetryAfter of the Closed policy. If zero
	// or negative, 1 s.
	Cooldown time.Duration
	// Policy decides when the primary cannot answer. The zero value is Open.
	Policy Policy
	// Local is the limiter the LocalShare policy decides on. Give it one of
	// its own: it keeps the shares' state under the callers' keys, which must
	// not mix with state it holds for other purposes. If nil with LocalShare,
	// the Limiter uses Open instead and New logs a warning. Unused by the
	// other policies.
	Local ringlimit.Limiter
	// Share returns the number of nodes that share each rule while the
	// primary is down (for example, the live members of the cluster); the
	// LocalShare policy divides each rule by it. It is called on every
	// LocalShare decision, so it must be cheap and safe for simultaneous
	// use. If nil, or if it returns less than 1, 1.
	Share func() int
	// OnStateChange, if not nil, is called on every change of the breaker's
	// state. It runs synchronously under the breaker's lock on the goroutine
	// of the call that caused the change: it must be short, must not block,
	// and must not call the Limiter.
	OnStateChange func(from, to State)
	// Logger receives the breaker's changes of state and configuration
	// warnings. If nil, nothing is logged.
	Logger *slog.Logger
	// Shard, if not nil, names the part of the primary that holds key (for
	// a Valkey Cluster, the master that serves the key's slot:
	// remote.Limiter.Shard), and the Limiter keeps one breaker per shard
	// (at most MaxShards), so that one failed part sends only its own keys
	// to the policy. "" is the shard of keys whose shard is unknown. It is
	// called on every call that reaches the breaker: it must be cheap and
	// safe for simultaneous use. If nil, one breaker guards the primary.
	// OnStateChange is called for every shard's breaker.
	Shard func(key string) string
}

// Limiter is a ringlimit.Limiter that asks a primary limiter (the central
// store) through a circuit breaker, and answers by its Policy, with
// Source ringlimit.Fallback and no error, when the primary cannot answer: it
// failed, it took longer than Timeout, or the breaker is open.
//
// A call waits for the primary at most Timeout; while the breaker is open it
// does not touch the primary at all.
//
// A key whose stored value the primary reports as not its own (an error
// wrapping ringlimit.ErrBadValue: another type or a foreign or corrupt value
// under the key) is a problem of that key, not an outage: the call is
// answered by the Policy, counted in Stats.BadValues, and not counted
// against the breaker, so other keys keep their decisions from the primary.
//
// Errors are returned only for bad input (validated here, and returned as-is
// from the primary: errors wrapping ringlimit.ErrInvalidRule, ErrInvalidKey or
// ErrInvalidHits), ringlimit.ErrClosed from the primary, and a caller's
// context that is done (its ctx.Err()). None of these counts against the
// breaker.
//
// Limiter is safe for simultaneous use by multiple goroutines.
type Limiter struct {
	primary ringlimit.Limiter
	breaker *Breaker // the only one, or the unknown shard's (shards.go)
	shards  *shards
	timeout time.Duration
	lag     *Lag
	retry   time.Duration // the Closed policy's RetryAfter: Cooldown in whole ms
	policy  Policy
	local   ringlimit.Limiter
	share   func() int
	log     *slog.Logger

	sum                     *logsum.Summarizer
	primaryErrors, timeouts atomic.Uint64
	badValues               atomic.Uint64
	canceled, resetsDropped atomic.Uint64
	fallbacks               [numPolicies]atomic.Uint64
}

var _ ringlimit.Limiter = (*Limiter)(nil)

// New returns a Limiter that asks primary, configured by c. A nil primary is
// a store that is never there: every decision comes from the policy.
func New(primary ringlimit.Limiter, c Config) *Limiter {
	l := &Limiter{
		primary: primary,
		timeout: c.Timeout,
		policy:  c.Policy,
		local:   c.Local,
		share:   c.Share,
		log:     c.Logger,
		lag:     c.Lag,
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.sum = logsum.New(l.log, 0)
	if l.timeout <= 0 {
		l.timeout = DefaultTimeout
	}
	cooldown := c.Cooldown
	if cooldown <= 0 {
		cooldown = DefaultCooldown
	}
	l.retry = ringlimit.Millis(int64(cooldown / time.Millisecond))
	if l.retry < cooldown { // round up to whole ms, saturated
		l.retry = ringlimit.Millis(int64(cooldown/time.Millisecond) + 1)
	}
	if l.policy >= numPolicies {
		l.log.Warn("failover: unknown policy; using open", "policy", l.policy.String())
		l.policy = Open
	}
	if l.policy == LocalShare && l.local == nil {
		l.log.Warn("failover: policy local_share without Config.Local; using open")
		l.policy = Open
	}
	bc := BreakerConfig{
		Name:          "failover",
		MaxFailures:   c.MaxFailures,
		MinSpan:       c.MinSpan,
		Cooldown:      cooldown,
		OnStateChange: c.OnStateChange,
		Logger:        l.log,
	}
	l.breaker = NewBreaker(bc)
	l.shards = newShards(c.Shard, l.breaker, bc, c.Floor, l.timeout, l.effective)
	return l
}

// AllowN consumes n hits on key if the primary admits them, or answers by
// the policy if the primary cannot answer.
func (l *Limiter) AllowN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error) {
	if err := ringlimit.ValidateCall(key, rule, n); err != nil {
		return ringlimit.Decision{}, err
	}
	return l.decide(ctx, key, rule, n, false)
}

// Peek asks the primary's Peek, or answers by the policy (for n = 0: Open
// reports the full capacity remaining) if the primary cannot answer.
func (l *Limiter) Peek(ctx context.Context, key string, rule ringlimit.Rule) (ringlimit.Decision, error) {
	if err := ringlimit.ValidateCall(key, rule, 0); err != nil {
		return ringlimit.Decision{}, err
	}
	return l.decide(ctx, key, rule, 0, true)
}

// Reset forgets key in the primary (and, with LocalShare, in Config.Local).
// A Reset that cannot reach the primary (breaker open, failure, timeout) is
// dropped and counted in Stats.ResetsDropped, not returned as an error: the
// store is down, and its state will be rebuilt or expire.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := ringlimit.ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		l.canceled.Add(1)
		return err
	}
	if l.policy == LocalShare {
		_ = l.local.Reset(ctx, key) // a failing local has nothing to forget
	}
	if l.primary == nil {
		return nil
	}
	g := l.shards.breaker(key)
	done, err := g.allow()
	if err != nil {
		l.resetsDropped.Add(1)
		return nil
	}
	_, err = l.ask(ctx, g.rto, done, func(ctx context.Context) (ringlimit.Decision, error) {
		return ringlimit.Decision{}, l.primary.Reset(ctx, key)
	})
	if err == errFailure {
		l.resetsDropped.Add(1)
		return nil
	}
	return err
}

// decide runs one validated AllowN (or Peek) through the breaker.
func (l *Limiter) decide(ctx context.Context, key string, rule ringlimit.Rule, n int64, peek bool) (ringlimit.Decision, error) {
	if err := ctx.Err(); err != nil {
		l.canceled.Add(1)
		return ringlimit.Decision{}, err
	}
	if l.primary == nil {
		return l.fallback(ctx, key, rule, n, peek), nil
	}
	// The breaker first: an open breaker answers without a timer or a
	// context, so the open path allocates nothing.
	g := l.shards.breaker(key)
	done, err := g.allow()
	if err != nil {
		return l.fallback(ctx, key, rule, n, peek), nil
	}
	d, err := l.ask(ctx, g.rto, done, func(ctx context.Context) (ringlimit.Decision, error) {
		if peek {
			return l.primary.Peek(ctx, key, rule)
		}
		return l.primary.AllowN(ctx, key, rule, n)
	})
	if err == errFailure {
		return l.fallback(ctx, key, rule, n, peek), nil
	}
	return d, err
}

// ask makes one call to the primary under the shard's effective timeout
// (rto's, see Config.Timeout) and reports its outcome to the breaker's done.
// It returns the primary's answer; errFailure if the primary failed or timed
// out (the caller falls back); or an error to return as-is: the caller's own
// ctx.Err(), or bad input or ErrClosed from the primary.
func (l *Limiter) ask(ctx context.Context, rto *RTO, done func(error), call func(context.Context) (ringlimit.Decision, error)) (ringlimit.Decision, error) {
	reported := false
	defer func() {
		if !reported { // the primary panicked: a failure, or a half-open breaker would wait for this probe forever
			done(errFailure)
		}
	}()
	start := time.Now()
	var tctx context.Context
	var cancel context.CancelFunc
	var w *watch
	if l.lag == nil {
		// Nothing tells this process's stalls from the primary's: wait the
		// whole Timeout.
		tctx, cancel = context.WithTimeout(ctx, l.timeout)
	} else {
		w = &watch{lag: l.lag, start: start, timeout: rto.Timeout(l.lag.Recent(start))}
		// The context's own deadline is the latest the watch may extend
		// the call to (valkey-go also serves a context with a deadline
		// inline); the watch cancels it when the call has had its timeout.
		tctx, cancel = context.WithTimeout(ctx, w.timeout+StallCredit(w.timeout))
		w.arm(cancel)
	}
	d, err := call(tctx)
	if w != nil {
		w.t.Stop()
	}
	end := time.Now()
	timedOut := err != nil && ((w != nil && w.fired.Load()) || tctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded))
	cancel()
	reported = true
	switch {
	case err == nil:
		if w != nil {
			rto.Observe(end.Sub(start) - l.lag.StalledSince(start, end))
		}
		done(nil)
		return d, nil
	case ctx.Err() != nil: // the caller gave up or ran out of time: not the primary's fault
		done(errIgnored)
		l.canceled.Add(1)
		return ringlimit.Decision{}, ctx.Err()
	case errors.Is(err, ringlimit.ErrBadValue): // that key's problem, not the primary's
		done(errIgnored)
		l.badValues.Add(1)
		l.sum.Warn("bad value", "failover: the store holds a value not ours under a key; answered by the policy", "err", err)
		return ringlimit.Decision{}, errFailure
	case errors.Is(err, ringlimit.ErrInvalidRule), errors.Is(err, ringlimit.ErrInvalidKey),
		errors.Is(err, ringlimit.ErrInvalidHits), errors.Is(err, ringlimit.ErrClosed),
		errors.Is(err, ringlimit.ErrWaitTooLong): // WaitN's refusal: the caller's deadline, not the primary's fault
		done(errIgnored)
		return ringlimit.Decision{}, err
	}
	if timedOut {
		rto.TimedOut()
		done(errTimeout)
		l.timeouts.Add(1)
	} else {
		done(errFailure)
		l.primaryErrors.Add(1)
	}
	return ringlimit.Decision{}, errFailure
}

// effective is g's timeout for a call now.
func (l *Limiter) effective(g *guard) time.Duration {
	if l.lag == nil {
		return l.timeout
	}
	return g.rto.Timeout(l.lag.Recent(time.Now()))
}

// watch times one call: when its timeout is up it cancels the call, unless
// this process spent part of the wait descheduled (Lag.Extend): then it
// waits that much longer.
type watch struct {
	lag     *Lag
	start   time.Time
	timeout time.Duration
	due     time.Time // of the timer; read and written by fire alone once armed
	cancel  context.CancelFunc
	t       *time.Timer
	fired   atomic.Bool // the call timed out
}

func (w *watch) arm(cancel context.CancelFunc) {
	w.cancel, w.due = cancel, w.start.Add(w.timeout)
	w.t = time.AfterFunc(time.Hour, w.fire)
	w.t.Reset(time.Until(w.due))
}

func (w *watch) fire() {
	now := time.Now()
	if more := w.lag.Extend(w.start, w.due, now, w.timeout); more > 0 {
		w.due = now.Add(more)
		w.t.Reset(more)
		return
	}
	w.fired.Store(true)
	w.cancel()
}

// State returns the breaker's state; with Config.Shard, the aggregate of
// the shards' (see Stats).
func (l *Limiter) State() State { return l.shards.state() }

// Stats are a Limiter's counters, all since New.
type Stats struct {
	BreakerStats // the breaker's state; Rejected counts calls answered by the policy without asking the primary

	// Shards, with Config.Shard, are the breakers of each shard (the unknown
	// shard "" first, then sorted); BreakerStats is then their aggregate:
	// counters summed, the State the worst of the named shards' (open, then
	// half-open, then closed). Nil without Config.Shard.
	Shards []ShardStats

	PrimaryErrors uint64 // primary calls that failed with an error
	Timeouts      uint64 // primary calls that got no answer within their effective timeout
	// Timeout is the effective timeout of the next call now (without
	// Config.Shard; with it, the unknown shard's: see Shards).
	Timeout       time.Duration
	Canceled      uint64 // calls whose caller's context was done: its error returned, nothing counted
	ResetsDropped uint64 // Resets that did not reach the primary
	// BadValues counts calls whose key held a value the primary did not
	// write (another type, a foreign or corrupt value: an error wrapping
	// ringlimit.ErrBadValue). Each was answered by the policy (and counted
	// in its Fallback field too), and none counted against the breaker.
	BadValues uint64

	// Decisions made by each policy. LocalShare decisions that the local
	// limiter could not make are counted as Open.
	FallbackOpen, FallbackClosed, FallbackLocalShare uint64
}

// Stats returns the current counters.
func (l *Limiter) Stats() Stats {
	agg, shards := l.shards.stats()
	return Stats{
		BreakerStats:       agg,
		Shards:             shards,
		PrimaryErrors:      l.primaryErrors.Load(),
		Timeouts:           l.timeouts.Load(),
		Timeout:            l.effective(l.shards.def),
		Canceled:           l.canceled.Load(),
		ResetsDropped:      l.resetsDropped.Load(),
		BadValues:          l.badValues.Load(),
		FallbackOpen:       l.fallbacks[Open].Load(),
		FallbackClosed:     l.fallbacks[Closed].Load(),
		FallbackLocalShare: l.fallbacks[LocalShare].Load(),
	}
}
