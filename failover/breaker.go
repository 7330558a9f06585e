package failover

import (
	"errors"
	"log/slog"
	"math"
	"strconv"
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
	// Success: the protected side answered. It resets the failure count and
	// closes a half-open breaker.
	Success Outcome = iota
	// Failure: the protected side failed or did not answer in time. Enough
	// consecutive failures open the breaker; a failed probe reopens it.
	Failure
	// Ignored: the call says nothing about the protected side's health (the
	// caller gave up, or the input was bad). It counts neither way and frees
	// the half-open probe slot.
	Ignored
)

var outcomeNames = [...]string{"success", "failure", "ignored"}

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
)

func (o Outcome) err() error {
	switch o {
	case Success:
		return nil
	case Ignored:
		return errIgnored
	default:
		return errFailure
	}
}

// BreakerConfig configures a Breaker. The zero BreakerConfig is valid.
type BreakerConfig struct {
	// Name appears in log lines (for example the peer's address). If empty,
	// "failover".
	Name string
	// MaxFailures is the number of consecutive failures that opens the
	// breaker. If zero or negative, 5.
	MaxFailures int
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
)

// Breaker is a circuit breaker: after MaxFailures consecutive failures it
// rejects every call for Cooldown, then lets one probe through, whose success
// closes it again and whose failure reopens it. A rejected call costs a
// mutex and a clock read and allocates nothing.
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
}

// NewBreaker returns a closed Breaker configured by c.
func NewBreaker(c BreakerConfig) *Breaker {
	b := &Breaker{name: c.Name, log: c.Logger, onState: c.OnStateChange}
	if b.name == "" {
		b.name = "failover"
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.sum = logsum.New(b.log, 0)
	maxFailures := uint32(DefaultMaxFailures)
	if c.MaxFailures > 0 {
		maxFailures = uint32(min(c.MaxFailures, math.MaxInt32))
	}
	cooldown := c.Cooldown
	if cooldown <= 0 {
		cooldown = DefaultCooldown
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        b.name,
		MaxRequests: 1, // one probe when half-open
		Timeout:     cooldown,
		ReadyToTrip: func(n gobreaker.Counts) bool {
			return n.ConsecutiveFailures >= maxFailures
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
	d, err := b.allow()
	if err != nil {
		return nil, err
	}
	return func(o Outcome) { d(o.err()) }, nil
}

// allow is Allow with gobreaker's own done function: the caller reports nil,
// errFailure or errIgnored.
func (b *Breaker) allow() (func(error), error) {
	d, err := b.cb.Allow()
	if err != nil {
		b.rejected.Add(1)
		return nil, ErrOpen
	}
	return d, nil
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
