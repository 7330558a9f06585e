package failover

import (
	"sync"
	"time"
)

// DefaultFloor is the least timeout an RTO gives (before the lag is added)
// when its floor is zero. On a LAN a round trip takes well under a
// millisecond, but a timed-out call that the other side still decides is
// decided twice (the next tier decides it again), so a spurious timeout
// costs more than a late one. Measured: with a 20 ms floor, the node
// package's tests under -race on a loaded 2-core machine timed out 5 to 16
// forwards of 110,000 to owners that were answering, and over-admitted; the
// old fixed 50 ms never did there. So the floor is that 50 ms: timeouts
// never shorten below what they were, and grow with the lag, the
// latencies seen and the backoff, up to the ceiling.
const DefaultFloor = 50 * time.Millisecond

// maxBackoff bounds the doublings after timeouts (2^6 = 64 × the estimate;
// the ceiling stops it sooner in practice).
const maxBackoff = 6

// RTO estimates how long to wait for the answers of one peer or one store
// shard from the latencies they have shown, as TCP's retransmission timer
// does (RFC 6298): the smoothed round trip plus four times its mean
// deviation (SRTT + 4·RTTVAR), never below the floor plus this process's
// own scheduling lag, never above the ceiling. Each timeout doubles it
// until the next answer (Karn's backoff), so an owner that is slow but
// answering is soon waited for up to the ceiling. Before its first sample
// it gives the ceiling.
//
// RTO is pure: it reads no clock; callers pass the samples and the lag. It
// is safe for simultaneous use by multiple goroutines.
type RTO struct {
	floor, ceiling time.Duration

	mu           sync.Mutex
	srtt, rttvar time.Duration
	sampled      bool
	backoff      uint8
}

// NewRTO returns an estimator that gives at least floor (DefaultFloor if
// zero or negative) and at most ceiling (DefaultTimeout if zero or
// negative; raised to the floor if below it).
func NewRTO(floor, ceiling time.Duration) *RTO {
	if floor <= 0 {
		floor = DefaultFloor
	}
	if ceiling <= 0 {
		ceiling = DefaultTimeout
	}
	return &RTO{floor: floor, ceiling: max(ceiling, floor)}
}

// Observe takes the round trip of an answered call: the time it waited for
// the answer, less any time this process spent descheduled meanwhile (see
// Lag.StalledSince). It ends any backoff.
func (r *RTO) Observe(rtt time.Duration) {
	rtt = max(rtt, 0)
	r.mu.Lock()
	if !r.sampled {
		r.srtt, r.rttvar, r.sampled = rtt, rtt/2, true
	} else {
		d := r.srtt - rtt
		if d < 0 {
			d = -d
		}
		r.rttvar = (3*r.rttvar + d) / 4
		r.srtt = (7*r.srtt + rtt) / 8
	}
	r.backoff = 0
	r.mu.Unlock()
}

// TimedOut records a call that got no answer within its timeout: the next
// timeouts are twice as long, until an answer.
func (r *RTO) TimedOut() {
	r.mu.Lock()
	if r.backoff < maxBackoff {
		r.backoff++
	}
	r.mu.Unlock()
}

// Timeout is the timeout for the next call while this process's timers run
// lag late: max(SRTT + 4·RTTVAR, floor + lag), doubled per timeout since the
// last answer, at most the ceiling; the ceiling before any answer.
func (r *RTO) Timeout(lag time.Duration) time.Duration {
	r.mu.Lock()
	srtt, rttvar, sampled, backoff := r.srtt, r.rttvar, r.sampled, r.backoff
	r.mu.Unlock()
	if !sampled {
		return r.ceiling
	}
	t := max(srtt+4*rttvar, r.floor+max(lag, 0))
	for range backoff {
		if t >= r.ceiling {
			break
		}
		t *= 2
	}
	return min(t, r.ceiling)
}

// Ceiling is the largest timeout the estimator gives.
func (r *RTO) Ceiling() time.Duration { return r.ceiling }
