//go:build !(linux && amd64)

package local

import "time"

// systemMillis reads the system clock in Unix milliseconds.
func systemMillis() int64 { return time.Now().UnixMilli() }
