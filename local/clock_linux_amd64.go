//go:build linux && amd64

package local

import (
	"syscall"
	"time"
)

// systemMillis reads the system clock in Unix milliseconds. On linux/amd64
// syscall.Gettimeofday is one vDSO call of CLOCK_REALTIME; time.Now makes
// two, the second for the monotonic reading, which a limiter that keeps
// Unix milliseconds never uses. Measured here: 36 against 75 ns of CPU, a
// fifth of a decision on a small key set (and the same clock as
// time.Now's wall reading, in µs).
func systemMillis() int64 {
	var tv syscall.Timeval
	if syscall.Gettimeofday(&tv) != nil {
		return time.Now().UnixMilli()
	}
	return tv.Sec*1000 + tv.Usec/1000
}
