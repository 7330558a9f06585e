package peer

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A call whose timer fires while Extend says this process was descheduled
// waits the extra time, and gets the answer that came meanwhile; without
// Extend it times out.
func TestExtendWaitsForTheAnswer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		extend bool
	}{{"extended", true}, {"not extended", false}} {
		t.Run(tc.name, func(t *testing.T) {
			h := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
			s := Serve(listen(t), ServerConfig{Secret: secret, Handler: h})
			defer s.Close()
			var release sync.Once
			defer release.Do(func() { close(h.release) })
			cfg := ClientConfig{Addr: s.Addr().String(), Secret: secret, Timeout: 5 * time.Second}
			asked := 0
			if tc.extend {
				cfg.Extend = func(start, due, now time.Time, timeout time.Duration) time.Duration {
					asked++
					if asked > 1 {
						return 0
					}
					// The answer comes while this process "was descheduled".
					release.Do(func() { close(h.release) })
					return 5 * time.Second // bounded by the answer, which is on its way
				}
			}
			c := NewClient(cfg)
			defer c.Close()
			_, err := c.DoTimeout(context.Background(), &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1}, 20*time.Millisecond)
			if tc.extend && (err != nil || asked != 1) {
				t.Fatalf("extended: err %v after %d asks, want the answer after one", err, asked)
			}
			if !tc.extend && !errors.Is(err, ErrTimeout) {
				t.Fatalf("err %v, want ErrTimeout", err)
			}
		})
	}
}
