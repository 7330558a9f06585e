package failover

import (
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/ringlimit/ringlimit/internal/logsum"
)

// State is a Breaker's state.
type State uint8

const (
	// StateClosed: calls go through; consecutive failures are counted.
	StateClosed State = iota
	// StateHalfOpen: the cooldown has passed; one probe call goes through,
	// the others are rejected until it reports.
	StateHalfOpen
	// StateOpen: every call is rejected until the cooldown has passed.
	StateOpen
)

var stateNames = [...]string{"closed", "half-open", "open"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	case gobreaker.StateOpen:
		return StateOpen
	default:
		return StateClosed
	}
}

// Outcome is what a call that a Breaker let through came to.
type Outcome uint8

const (
	// Success: the protected side answered, however slowly. It ends a run
	// of failures and closes a half-open breaker.
	Success Outcome = iota
	// Failure: evidence that the protected side failed: a refused or reset
	// connection, an error answer. MaxFailures in a run open the breaker; a
	// failed probe reopens it.
	Failure
	// Ignored: the call says nothing about the protected side's health (the
	// caller gave up, or the input was bad). It counts neither way and frees
	// the half-open probe slot.
	Ignored
	// Timeout: the protected side did not answer in time. Alone it is not
	// evidence of failure (a slow side is not a dead one): a run of
	// MaxFailures timeouts and failures opens the breaker only if it spans
	// at least MinSpan with no success between. A timed-out probe reopens
	// a half-open breaker.
	Timeout
)

var outcomeNames = [...]string{"success", "failure", "ignored", "timeout"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// ErrOpen is returned by Breaker.Allow when it rejects a call: the breaker is
// open, or half-open with its probe still in flight.
var ErrOpen = errors.New("failover: breaker open")

// The errors the Breaker hands gobreaker to report an Outcome.
var (
	errFailure = errors.New("failover: failure")
	errIgnored = errors.New("failover: ignored")
	errTimeout = errors.New("failover: timeout")
)

func (o Outcome) err() error {
	switch o {
	case Success:
		return nil
	case Ignored:
		return errIgnored
	case Timeout:
		return errTimeout
	default:
		return errFailure
	}
}

// BreakerConfig configures a Breaker. The zero BreakerConfig is valid.
type BreakerConfig struct {
	// Name appears in log lines (for example the peer's address). If empty,
	// "failover".
	Name string
	// MaxFailures is the number of consecutive Failures that opens the
	// breaker, and the least length of a run of Timeouts (and Failures)
	// that does. If zero or negative, 5.
	MaxFailures int
	// MinSpan is how long a run of consecutive Timeouts (and Failures), with
	// no Success between, must last before it opens the breaker: a few slow
	// answers, or a pause of the other side shorter than this, are not
	// evidence of failure. If zero or negative, DefaultMinSpan (500 ms).
	MinSpan time.Duration
	// Now tells the time for MinSpan. If nil, time.Now. (The cooldown is
	// timed by the system clock.)
	Now func() time.Time
	// Cooldown is how long the breaker stays open before it lets one probe
	// call through. If zero or negative, 1 s.
	Cooldown time.Duration
	// OnStateChange, if not nil, is called on every change of state. It runs
	// synchronously under the breaker's lock, on the goroutine of the call
	// that caused the change: it must be short, must not block, and must not
	// call the Breaker (or the Limiter that owns it).
	OnStateChange func(from, to State)
	// Logger receives a line on every change of state (repeated changes of
	// one kind within 10 s are counted into one summary line, written with
	// the next such change). If nil, nothing is logged.
	Logger *slog.Logger
}

// Defaults for the zero values of BreakerConfig and Config.
const (
	DefaultMaxFailures = 5
	DefaultCooldown    = time.Second
	DefaultMinSpan     = 500 * time.Millisecond
)

// Breaker is a circuit breaker that opens on evidence of failure: after
// MaxFailures consecutive Failures (refused or reset connections, errors),
// or a run of at least MaxFailures Timeouts and Failures with no Success
// between that spans at least MinSpan, it rejects every call for Cooldown,
// then lets one probe through, whose success closes it again and whose
// failure or timeout reopens it. Slow answers are Successes. A rejected
// call costs a mutex and a clock read and allocates nothing.
//
// Breaker is safe for simultaneous use by multiple goroutines.
type Breaker struct {
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
	name    string
	log     *slog.Logger
	sum     *logsum.Summarizer
	onState func(from, to State)

	changes  atomic.Uint64
	opens    atomic.Uint64
	rejected atomic.Uint64

	maxFailures int
	minSpan     time.Duration
	now         func() time.Time
	runMu       sync.Mutex
	run         int       // consecutive Failures and Timeouts
	runHard     int       // of those, Failures
	runStart    time.Time // the first of the run
	trip        bool      // the run is evidence: the report being made opens the breaker
	closed      bool      // gobreaker's state is closed (set with runMu held, by stateChanged)

	// fast is set while the breaker is closed with no run of failures or
	// timeouts under way (closed and run == 0, kept under runMu): a call
	// then goes through without gobreaker, whose closed state would let it
	// through anyway, and a Success reported changes nothing; a Failure or
	// Timeout is handed to gobreaker then, as a call made and reported at
	// once. So the common call costs an atomic load and allocates nothing.
	fast        atomic.Bool
	fastOutcome func(Outcome) // Allow's done in the fast case
	fastErr     func(error)   // allow's
}

// NewBreaker returns a closed Breaker configured by c.
func NewBreaker(c BreakerConfig) *Breaker {
	b := &Breaker{name: c.Name, log: c.Logger, onState: c.OnStateChange, minSpan: c.MinSpan, now: c.Now}
	if b.minSpan <= 0 {
		b.minSpan = DefaultMinSpan
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.name == "" {
		b.name = "failover"
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.sum = logsum.New(b.log, 0)
	b.closed = true
	b.fast.Store(true)
	b.fastErr = b.fastReport
	b.fastOutcome = func(o Outcome) { b.fastReport(o.err()) }
	b.maxFailures = DefaultMaxFailures
	if c.MaxFailures > 0 {
		b.maxFailures = min(c.MaxFailures, math.MaxInt32)
	}
	cooldown := c.Cooldown
	if cooldown <= 0 {
		cooldown = DefaultCooldown
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        b.name,
		MaxRequests: 1, // one probe when half-open
		Timeout:     cooldown,
		// The run (see report) decides; gobreaker asks on every failure
		// reported while closed.
		ReadyToTrip: func(gobreaker.Counts) bool {
			b.runMu.Lock()
			defer b.runMu.Unlock()
			return b.trip
		},
		IsExcluded:    func(err error) bool { return err == errIgnored },
		IsSuccessful:  func(err error) bool { return err == nil },
		OnStateChange: b.stateChanged,
	})
	return b
}

// stateChanged runs under gobreaker's lock.
func (b *Breaker) stateChanged(_ string, from, to gobreaker.State) {
	f, t := stateOf(from), stateOf(to)
	b.changes.Add(1)
	b.runMu.Lock()
	b.run, b.runHard, b.trip = 0, 0, false // a new state starts a new run
	b.closed = t == StateClosed
	b.fast.Store(b.closed)
	b.runMu.Unlock()
	level := slog.LevelInfo
	if t == StateOpen {
		b.opens.Add(1)
		level = slog.LevelWarn
	}
	// A flapping breaker (a store that answers every other probe) changes
	// state every Cooldown: one line per kind of change per interval.
	b.sum.Log(level, "to "+t.String(), "failover: breaker state changed", "breaker", b.name, "from", f.String(), "to", t.String())
	if b.onState != nil {
		b.onState(f, t)
	}
}

// Allow asks whether a call may go through. If it may, the caller makes the
// call and then must call done exactly once with its Outcome (a call that is
// never reported keeps a half-open breaker from ever letting another probe
// through; an Outcome other than the three is a Failure). If not, Allow
// returns ErrOpen at once.
func (b *Breaker) Allow() (done func(Outcome), err error) {
	if b.fast.Load() {
		return b.fastOutcome, nil
	}
	d, err := b.slowAllow()
	if err != nil {
		return nil, err
	}
	return func(o Outcome) { d(o.err()) }, nil
}

// allow is Allow with the errors for outcomes: the caller reports nil,
// errFailure, errTimeout or errIgnored.
func (b *Breaker) allow() (func(error), error) {
	if b.fast.Load() {
		return b.fastErr, nil
	}
	return b.slowAllow()
}

// fastReport reports the outcome of a call let through in the fast case
// (see Breaker.fast). A Success that comes after a run began (a call made
// before the run's first failure) ends the run, as in gobreaker's path.
func (b *Breaker) fastReport(err error) {
	switch err {
	case nil:
		if !b.fast.Load() {
			b.report(nil)
		}
	case errIgnored:
	default:
		b.runMu.Lock()
		closed := b.closed
		b.runMu.Unlock()
		if !closed {
			// Made before the breaker opened: it counts into the run
			// (as a stale report did through gobreaker, which dropped
			// it), and must not take a half-open breaker's probe.
			b.report(err)
			return
		}
		d, err2 := b.cb.Allow()
		if err2 != nil {
			return // opened meanwhile: a report of the state before, dropped as gobreaker drops one
		}
		b.report(err)
		d(err)
	}
}

// slowAllow asks gobreaker.
func (b *Breaker) slowAllow() (func(error), error) {
	d, err := b.cb.Allow()
	if err != nil {
		b.rejected.Add(1)
		return nil, ErrOpen
	}
	return func(err error) { b.report(err); d(err) }, nil
}

// report counts an outcome into the run of failures and timeouts, and
// decides whether the run is evidence enough to open the breaker (read by
// ReadyToTrip when gobreaker takes the report next).
func (b *Breaker) report(err error) {
	b.runMu.Lock()
	defer b.runMu.Unlock()
	switch err {
	case nil:
		b.run, b.runHard, b.trip = 0, 0, false
		b.fast.Store(b.closed)
		return
	case errIgnored:
		return
	case errTimeout:
	default:
		err = errFailure
		b.runHard++
	}
	b.fast.Store(false)
	now := b.now()
	if b.run == 0 {
		b.runStart = now
	}
	b.run++
	b.trip = b.runHard >= b.maxFailures || (b.run >= b.maxFailures && now.Sub(b.runStart) >= b.minSpan)
}

// State returns the breaker's state. An open breaker whose cooldown has
// passed reports (and becomes) half-open.
func (b *Breaker) State() State { return stateOf(b.cb.State()) }

// BreakerStats are a Breaker's counters.
type BreakerStats struct {
	State        State
	StateChanges uint64 // changes of state since NewBreaker
	Opens        uint64 // of those, changes to StateOpen
	Rejected     uint64 // calls Allow refused with ErrOpen
}

// Stats returns the breaker's state and counters.
func (b *Breaker) Stats() BreakerStats {
	return BreakerStats{
		State:        b.State(),
		StateChanges: b.changes.Load(),
		Opens:        b.opens.Load(),
		Rejected:     b.rejected.Load(),
	}
}
