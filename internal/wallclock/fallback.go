package wallclock

import "time"

func fallback() int64 { return time.Now().UnixMilli() }
