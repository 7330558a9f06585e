package failover_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/failover"
)

const ms = time.Millisecond

// TestRTO walks the estimator through RFC 6298's rules, one step a row.
func TestRTO(t *testing.T) {
	type step struct {
		sample  time.Duration // > 0: Observe it; 0: nothing; -1: TimedOut
		lag     time.Duration
		want    time.Duration // Timeout(lag) after the step
		comment string
	}
	const timedOut = -1
	for _, tc := range []struct {
		name           string
		floor, ceiling time.Duration
		steps          []step
	}{
		{"before any answer, the ceiling", 10 * ms, 50 * ms, []step{
			{0, 0, 50 * ms, "no sample"},
			{0, 30 * ms, 50 * ms, "lag changes nothing without a sample"},
		}},
		{"fast answers: the floor", 10 * ms, 50 * ms, []step{
			{ms / 2, 0, 10 * ms, "SRTT 0.5, RTTVAR 0.25: 1.5 ms < floor"},
			{ms / 2, 0, 10 * ms, ""},
		}},
		{"the floor follows the lag", 10 * ms, 500 * ms, []step{
			{ms, 0, 10 * ms, ""},
			{0, 75 * ms, 85 * ms, "descheduled 75 ms at a stretch: floor + lag"},
			{0, time.Second, 500 * ms, "never above the ceiling"},
		}},
		{"SRTT + 4·RTTVAR", ms, time.Second, []step{
			{20 * ms, 0, 60 * ms, "first sample R: SRTT R, RTTVAR R/2: 20 + 40"},
			{20 * ms, 0, 50 * ms, "RTTVAR 3/4·10 + 1/4·0 = 7.5: 20 + 30"},
			{60 * ms, 0, 87500 * time.Microsecond, "RTTVAR 3/4·7.5 + 1/4·40 = 15.625, SRTT 7/8·20 + 1/8·60 = 25: 25 + 62.5"},
		}},
		{"timeouts double it, an answer ends the backoff", 10 * ms, 200 * ms, []step{
			{ms, 0, 10 * ms, ""},
			{timedOut, 0, 20 * ms, ""},
			{timedOut, 0, 40 * ms, ""},
			{timedOut, 0, 80 * ms, ""},
			{timedOut, 0, 160 * ms, ""},
			{timedOut, 0, 200 * ms, "the ceiling stops it"},
			{timedOut, 0, 200 * ms, ""},
			{ms, 0, 10 * ms, "an answer: back to the estimate"},
		}},
		{"zero floor and ceiling: the defaults", 0, 0, []step{
			{0, 0, failover.DefaultTimeout, ""},
			{ms / 10, 0, failover.DefaultFloor, ""},
		}},
		{"a ceiling below the floor is raised to it", 20 * ms, 5 * ms, []step{
			{0, 0, 20 * ms, ""},
			{ms, 0, 20 * ms, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := failover.NewRTO(tc.floor, tc.ceiling)
			for i, s := range tc.steps {
				switch {
				case s.sample == timedOut:
					r.TimedOut()
				case s.sample > 0:
					r.Observe(s.sample)
				}
				if got := r.Timeout(s.lag); got != s.want {
					t.Fatalf("step %d (%s): Timeout(%v) = %v, want %v", i, s.comment, s.lag, got, s.want)
				}
			}
		})
	}
}
