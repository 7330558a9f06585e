// Package wallclock reads the system's wall clock in Unix milliseconds,
// as cheaply as the platform allows: local's decisions read it once each,
// and time.Now, which reads the wall clock and the monotonic clock, is
// about half a decision's cost on a small key set.
//
// Inside a testing/synctest bubble time.Now is the bubble's fake clock,
// which a direct read of the system clock does not follow. Direct tells
// whether it is safe to read directly from the calling goroutine: a
// caller asks once (say when it is made) and keeps the answer, so that a
// limiter made inside a bubble follows the bubble's clock.
package wallclock

import "time"

// Millis reads the wall clock as Unix milliseconds, directly where the
// platform allows (see Direct), else through time.Now.
func Millis() int64 { return millis() }

// Direct reports whether Millis reads the system clock directly and agrees
// with time.Now on the calling goroutine, within a second: false where
// Millis goes through time.Now anyway, and inside a testing/synctest
// bubble (whose clock starts in the year 2000).
func Direct() bool {
	if !direct {
		return false
	}
	d := millis() - time.Now().UnixMilli()
	return d > -1000 && d < 1000
}

func fallback() int64 { return time.Now().UnixMilli() }
