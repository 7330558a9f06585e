package remote

import "strconv"

// SetTTLPad adds ms to every TTL the limiter's scripts set. Tests that drive
// a manual clock use it so that the server's own clock never expires state
// that the manual clock still needs (local keeps such state too).
func SetTTLPad(l *Limiter, ms int64) { l.ttlPad = strconv.FormatInt(ms, 10) }
