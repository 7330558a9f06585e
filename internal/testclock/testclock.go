// Package testclock is a manual ringlimit.Clock for tests.
package testclock

import (
	"sync/atomic"
	"time"
)

// Clock is a ringlimit.Clock that moves only when told. Safe for
// simultaneous use.
type Clock struct{ ns atomic.Int64 }

// New returns a Clock set to t.
func New(t time.Time) *Clock {
	c := new(Clock)
	c.Set(t)
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to t, forwards or backwards.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Advance moves the clock by d and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time { return time.Unix(0, c.ns.Add(int64(d))) }
