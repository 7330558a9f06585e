package logsum

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time      { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) { f.mu.Lock(); f.t = f.t.Add(d); f.mu.Unlock() }

func newTest(every time.Duration) (*Summarizer, *bytes.Buffer, *fakeNow) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	s := New(l, every)
	clk := &fakeNow{t: time.Unix(1000, 0)}
	s.now = clk.now
	return s, &buf, clk
}

func lines(b *bytes.Buffer) []string {
	return strings.FieldsFunc(b.String(), func(r rune) bool { return r == '\n' })
}

// A flood of 100,000 lines of one kind over 10 intervals writes at most two
// lines per interval, and the counts in the summaries add up to the flood.
func TestFloodIsSummarised(t *testing.T) {
	s, buf, clk := newTest(time.Second)
	const total = 100_000
	for i := range total {
		s.Warn("refused", "peer: refused a connection", "remote", fmt.Sprintf("127.0.0.1:%d", i%60000))
		if i%(total/10) == total/10-1 {
			clk.add(time.Second)
		}
	}
	s.Flush(true)
	ls := lines(buf)
	if len(ls) > 2*11 {
		t.Fatalf("%d lines for a flood over 10 intervals, want at most 22", len(ls))
	}
	var written, counted int64
	for _, l := range ls {
		if i := strings.Index(l, "suppressed="); i >= 0 {
			var n int64
			fmt.Sscanf(l[i+len("suppressed="):], "%d", &n)
			counted += n
		} else {
			written++
		}
	}
	if written+counted != total {
		t.Fatalf("written %d + counted %d = %d, want %d", written, counted, written+counted, total)
	}
}

// Kinds are counted apart, and the number of kinds is bounded.
func TestKindsApartAndBounded(t *testing.T) {
	s, buf, _ := newTest(time.Second)
	s.Warn("a", "first a")
	s.Warn("b", "first b")
	s.Warn("a", "second a")
	if got := len(lines(buf)); got != 2 {
		t.Fatalf("%d lines, want 2 (one per kind)", got)
	}
	if s.Suppressed("a") != 1 || s.Suppressed("b") != 0 {
		t.Fatalf("suppressed a=%d b=%d, want 1 and 0", s.Suppressed("a"), s.Suppressed("b"))
	}
	for i := range 10 * MaxKinds {
		s.Warn(fmt.Sprint("k", i), "x")
	}
	s.mu.Lock()
	n := len(s.kinds)
	s.mu.Unlock()
	if n > MaxKinds+1 {
		t.Fatalf("%d kinds tracked, want at most %d", n, MaxKinds+1)
	}
}

// Flush writes only the summaries whose interval is over, unless all.
func TestFlush(t *testing.T) {
	s, buf, clk := newTest(time.Second)
	s.Warn("a", "msg", "n", 1)
	s.Warn("a", "msg", "n", 2)
	s.Flush(false)
	if got := len(lines(buf)); got != 1 {
		t.Fatalf("%d lines after an early Flush, want 1", got)
	}
	clk.add(time.Second)
	s.Flush(false)
	ls := lines(buf)
	if len(ls) != 2 || !strings.Contains(ls[1], "suppressed=1") || !strings.Contains(ls[1], "last.n=2") {
		t.Fatalf("after the interval: %q", ls)
	}
	s.Flush(true)
	if got := len(lines(buf)); got != 2 {
		t.Fatalf("a second Flush wrote again: %d lines", got)
	}
}

func TestNilLoggerDiscards(t *testing.T) {
	s := New(nil, 0)
	s.Warn("a", "x")
	s.Flush(true)
	var nilS *Summarizer
	nilS.Warn("a", "x")
}

// Counted counts every line given to Log, written or suppressed; a nil
// Summarizer counts nothing.
func TestCounted(t *testing.T) {
	s, buf, _ := newTest(time.Second)
	for range 5 {
		s.Warn("a", "line a")
	}
	s.Warn("b", "line b")
	if got := s.Counted(); got != 6 {
		t.Fatalf("Counted = %d, want 6", got)
	}
	if n := len(lines(buf)); n != 2 {
		t.Fatalf("%d lines written, want 2", n)
	}
	var none *Summarizer
	if none.Counted() != 0 {
		t.Fatal("a nil Summarizer counted")
	}
}
