package ring

import (
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
)

// Junk UDP packets at a real memberlist on loopback make it log one line
// each ("Decrypt packet failed", "discarding packet", ...): through the
// bridge they give one line per kind per interval and a summary with the
// count, not a line per packet (issue 14: 473k junk packets had given 153k
// lines).
func TestJunkPacketsDoNotFloodTheLog(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret []byte
	}{{"encrypted", []byte("0123456789abcdef")}, {"plain", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			h := &recordHandler{}
			cfg := FastLocalConfig("junk-" + tc.name)
			cfg.SecretKey = tc.secret
			cfg.Logger = slog.New(h)
			cfg.LogSummary = time.Minute // one interval for the whole test, however slow the machine
			m := start(t, cfg).Membership
			conn, err := net.Dial("udp", m.GossipAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			rng := rand.New(rand.NewPCG(4, 73))
			const packets = 20_000
			for sent := 0; sent < packets; {
				for range 250 { // paced, so the socket buffer does not drop them
					b := make([]byte, 1+rng.IntN(200))
					for i := range b {
						b[i] = byte(rng.Uint32())
					}
					if _, err := conn.Write(b); err != nil {
						t.Fatal(err)
					}
					sent++
				}
				deadline := time.Now().Add(5 * time.Second)
				for m.sum.Counted() < int64(sent)*9/10 {
					if time.Now().After(deadline) {
						t.Fatalf("memberlist logged %d lines for %d junk packets", m.sum.Counted(), sent)
					}
					time.Sleep(time.Millisecond) // polling, with a deadline
				}
			}
			if err := m.Shutdown(); err != nil { // flushes the summaries
				t.Fatal(err)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			var written int
			var suppressed int64
			for _, r := range h.records {
				if !strings.HasPrefix(r.Message, "memberlist:") {
					continue
				}
				written++
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "suppressed" {
						suppressed += a.Value.Int64()
					}
					return true
				})
			}
			t.Logf("%d junk packets: %d lines from memberlist, %d counted in their summaries", packets, written, suppressed)
			// About 16 kinds of line, each written once and summarised once.
			if written > 40 || suppressed < packets*8/10 {
				t.Fatalf("%d lines written, %d suppressed; want at most 40 lines, with at least %d counted in summaries",
					written, suppressed, packets*8/10)
			}
		})
	}
}
