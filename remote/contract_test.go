package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
)

// 32 goroutines hammer one key with Limit 1000: exactly 1000 pass, for every
// algorithm, and the leaky bucket hands out 1000 distinct departure slots.
func TestAtomicity(t *testing.T) {
	_, c := server(t)
	clk := testclock.New(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
	l := remote.New(c, remote.Config{Clock: clk})
	const workers, each, limit = 32, 40, 1000
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			rule := ringlimit.Rule{Algorithm: alg, Limit: limit, Window: 24 * time.Hour}
			key := "hot-" + alg.String()
			var mu sync.Mutex
			var admitted int
			delays := map[time.Duration]bool{}
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for range workers {
				wg.Go(func() {
					for range each {
						d, err := l.AllowN(context.Background(), key, rule, 1)
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							mu.Lock()
							admitted++
							delays[d.Delay] = true
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if admitted != limit {
				t.Errorf("%d of %d admitted, want exactly %d", admitted, workers*each, limit)
			}
			if alg == ringlimit.LeakyBucket && len(delays) != limit {
				t.Errorf("%d distinct Delays among %d admitted hits, want one slot each", len(delays), admitted)
			}
		})
	}
}

// SCRIPT FLUSH between calls changes nothing for the caller: valkey-go falls
// back to EVAL on NOSCRIPT, and the decisions are the ones local makes.
func TestNoScript(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	clk := testclock.New(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
	rem := remote.New(c, remote.Config{Clock: clk})
	loc := local.New(local.Config{Clock: clk})
	before := commandStats(t, c)
	for _, alg := range algorithms {
		rule := ringlimit.Rule{Algorithm: alg, Limit: 5, Window: time.Second}
		for i := range 8 {
			if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			var dl, dr ringlimit.Decision
			var el, er error
			if i%3 == 2 {
				dl, el = loc.Peek(ctx, "k"+alg.String(), rule)
				dr, er = rem.Peek(ctx, "k"+alg.String(), rule)
			} else {
				dl, el = loc.AllowN(ctx, "k"+alg.String(), rule, 2)
				dr, er = rem.AllowN(ctx, "k"+alg.String(), rule, 2)
			}
			if el != nil || er != nil {
				t.Fatalf("%s call %d after SCRIPT FLUSH: local %v, remote %v", alg, i, el, er)
			}
			dr.Source = dl.Source
			if dl != dr {
				t.Fatalf("%s call %d after SCRIPT FLUSH:\nlocal  %+v\nremote %+v", alg, i, dl, dr)
			}
			clk.Advance(150 * time.Millisecond)
		}
	}
	after := commandStats(t, c)
	evals := after["eval"].calls - before["eval"].calls + after["eval_ro"].calls - before["eval_ro"].calls
	if evals != 40 {
		t.Errorf("%d EVAL/EVAL_RO fallbacks, want 40 (one per call after each flush)", evals)
	}
}

// Every key written has a TTL no longer than the decision's ResetAfter, and
// at least 1 ms; nothing is left forever.
func TestTTL(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	l := remote.New(c, remote.Config{Prefix: "ttl:"}) // the server's TIME
	rng := rand.New(rand.NewPCG(1, 2))
	checked := 0
	for _, alg := range algorithms {
		for _, rule := range []ringlimit.Rule{
			{Algorithm: alg, Limit: 5, Window: time.Minute},
			{Algorithm: alg, Limit: 1000, Window: time.Second, Burst: 10},
			{Algorithm: alg, Limit: 1_000_000, Window: 24 * time.Hour},
			{Algorithm: alg, Limit: 3, Window: 2 * time.Millisecond},
		} {
			for i := range 20 {
				key := fmt.Sprintf("%s-%d-%d", alg, rule.Limit, i%4)
				n := 1 + rng.Int64N(min(3, rule.Capacity()))
				start := time.Now()
				d, err := l.AllowN(ctx, key, rule, n)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					continue
				}
				pttl, err := c.Do(ctx, c.B().Pttl().Key(l.Key(key)).Build()).AsInt64()
				if err != nil {
					t.Fatal(err)
				}
				if pttl == -2 && d.ResetAfter <= time.Since(start)+time.Millisecond {
					continue // a TTL shorter than the time since the call may be gone already
				}
				if pttl < 0 || time.Duration(pttl)*time.Millisecond > max(d.ResetAfter, time.Millisecond) {
					t.Fatalf("%s %+v: PTTL %d ms after %+v", alg, rule, pttl, d)
				}
				checked++
			}
		}
	}
	if checked < 200 {
		t.Fatalf("only %d TTLs checked", checked)
	}
	keys, err := c.Do(ctx, c.B().Keys().Pattern("ttl:*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ttl, _ := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64(); ttl == -1 {
			t.Errorf("%q has no TTL", k)
		}
	}
	if len(keys) == 0 {
		t.Error("no keys left to check")
	}
}

// Peeks and denied calls write nothing; admitted calls write exactly once.
func TestPeekAndDenialWriteNothing(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	clk := testclock.New(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))
	l := remote.New(c, remote.Config{Clock: clk})
	writes := func() int64 {
		st := commandStats(t, c)
		return st["set"].calls + st["setrange"].calls + st["append"].calls + st["pexpire"].calls + st["del"].calls
	}
	for _, alg := range algorithms {
		rule := ringlimit.Rule{Algorithm: alg, Limit: 2, Window: time.Minute}
		key := "k-" + alg.String()
		s0 := writes()
		if _, err := l.Peek(ctx, key, rule); err != nil {
			t.Fatal(err)
		}
		if got, _ := c.Do(ctx, c.B().Exists().Key(l.Key(key)).Build()).AsInt64(); got != 0 {
			t.Errorf("%s: a peek on a new key created it", alg)
		}
		if d, err := l.AllowN(ctx, key, rule, 2); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v %v", alg, d, err)
		}
		raw, _ := c.Do(ctx, c.B().Get().Key(l.Key(key)).Build()).AsBytes()
		for range 3 {
			if d, err := l.AllowN(ctx, key, rule, 1); err != nil || d.Allowed {
				t.Fatalf("%s: %+v %v, want denied", alg, d, err)
			}
			if _, err := l.Peek(ctx, key, rule); err != nil {
				t.Fatal(err)
			}
			if _, err := l.AllowN(ctx, key, rule, 0); err != nil {
				t.Fatal(err)
			}
		}
		if got := writes() - s0; got != 1 {
			t.Errorf("%s: %d writes for one admitted call, three denied and six peeks; want 1", alg, got)
		}
		if now, _ := c.Do(ctx, c.B().Get().Key(l.Key(key)).Build()).AsBytes(); !bytes.Equal(now, raw) {
			t.Errorf("%s: state changed by denied calls and peeks", alg)
		}
	}
}

// Bad input is refused with the sentinels local uses, before any command is
// sent.
func TestBadInputSendsNothing(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	rem := remote.New(c, remote.Config{})
	loc := local.New(local.Config{})
	good := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second}
	cases := []struct {
		key  string
		rule ringlimit.Rule
		n    int64
		want error
	}{
		{"", good, 1, ringlimit.ErrInvalidKey},
		{strings.Repeat("x", ringlimit.MaxKeyLen+1), good, 1, ringlimit.ErrInvalidKey},
		{"k", ringlimit.Rule{Limit: 0, Window: time.Second}, 1, ringlimit.ErrInvalidRule},
		{"k", ringlimit.Rule{Limit: 1, Window: 1500 * time.Microsecond}, 1, ringlimit.ErrInvalidRule},
		{"k", ringlimit.Rule{Algorithm: 9, Limit: 1, Window: time.Second}, 1, ringlimit.ErrInvalidRule},
		{"k", ringlimit.Rule{Limit: 1 << 40, Window: time.Hour}, 1, ringlimit.ErrInvalidRule},
		{"k", ringlimit.Rule{Algorithm: ringlimit.SlidingLog, Limit: 1, Window: ringlimit.MaxLogWindow + time.Millisecond}, 1, ringlimit.ErrInvalidRule},
		{"k", good, -1, ringlimit.ErrInvalidHits},
		{"k", good, 11, ringlimit.ErrInvalidHits},
		{"k", ringlimit.Rule{Algorithm: ringlimit.LeakyBucket, Limit: 10, Window: time.Second, Burst: 3}, 4, ringlimit.ErrInvalidHits},
	}
	// Load the script first, so that a good call is one EVALSHA.
	if _, err := rem.AllowN(ctx, "warm", good, 1); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, c)
	for _, tc := range cases {
		_, er := rem.AllowN(ctx, tc.key, tc.rule, tc.n)
		_, el := loc.AllowN(ctx, tc.key, tc.rule, tc.n)
		if !errors.Is(er, tc.want) || !errors.Is(el, tc.want) {
			t.Errorf("AllowN(%.10q, %+v, %d): remote %v, local %v; want %v", tc.key, tc.rule, tc.n, er, el, tc.want)
		}
		if tc.n >= 0 && tc.n <= 1 {
			if _, err := rem.Peek(ctx, tc.key, tc.rule); !errors.Is(err, tc.want) {
				t.Errorf("Peek(%.10q, %+v): %v, want %v", tc.key, tc.rule, err, tc.want)
			}
		}
	}
	if err := rem.Reset(ctx, ""); !errors.Is(err, ringlimit.ErrInvalidKey) {
		t.Errorf("Reset(\"\"): %v", err)
	}
	if got := scriptCalls(t, c) - before; got != 0 {
		t.Errorf("bad input sent %d commands", got)
	}
	// The counter sees commands: a good call moves it.
	if _, err := rem.AllowN(ctx, "k", good, 1); err != nil {
		t.Fatal(err)
	}
	if got := scriptCalls(t, c) - before; got != 1 {
		t.Errorf("one good call: %d commands, want 1", got)
	}
}

// A cancelled context returns its error and sends nothing.
func TestCancelledContext(t *testing.T) {
	_, c := server(t)
	l := remote.New(c, remote.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: time.Second}
	before := scriptCalls(t, c)
	if _, err := l.AllowN(ctx, "k", rule, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("AllowN: %v", err)
	}
	if _, err := l.Peek(ctx, "k", rule); !errors.Is(err, context.Canceled) {
		t.Errorf("Peek: %v", err)
	}
	if err := l.Reset(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Reset: %v", err)
	}
	if got := scriptCalls(t, c) - before; got != 0 {
		t.Errorf("a cancelled context sent %d commands", got)
	}
}

// A dead server is an error naming the operation, not a decision.
func TestServerDown(t *testing.T) {
	srv, c := server(t)
	l := remote.New(c, remote.Config{})
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 1, Window: time.Second}
	srv.Kill()
	_, err := l.AllowN(context.Background(), "k", rule, 1)
	if err == nil || !strings.Contains(err.Error(), "remote: eval token_bucket") {
		t.Fatalf("AllowN with the server down: %v", err)
	}
}

// Reset deletes the key's state; the next call starts with full capacity.
func TestReset(t *testing.T) {
	_, c := server(t)
	ctx := context.Background()
	// A frozen clock: with the server's, a leaky bucket lets a hit out a
	// millisecond later.
	l := remote.New(c, remote.Config{Clock: testclock.New(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC))})
	for _, alg := range algorithms {
		rule := ringlimit.Rule{Algorithm: alg, Limit: 3, Window: time.Hour}
		if d, err := l.AllowN(ctx, "r", rule, 3); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v %v", alg, d, err)
		}
		if d, _ := l.Peek(ctx, "r", rule); d.Allowed {
			t.Fatalf("%s: admitted past the limit: %+v", alg, d)
		}
		if err := l.Reset(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		if n, _ := c.Do(ctx, c.B().Exists().Key(l.Key("r")).Build()).AsInt64(); n != 0 {
			t.Fatalf("%s: key still there after Reset", alg)
		}
		if d, err := l.AllowN(ctx, "r", rule, 3); err != nil || !d.Allowed || d.Remaining != 0 {
			t.Fatalf("%s after Reset: %+v %v", alg, d, err)
		}
	}
}

// Without a Clock the scripts read the server's TIME: a daily fixed window
// resets at the next UTC midnight.
func TestServerTime(t *testing.T) {
	_, c := server(t)
	l := remote.New(c, remote.Config{})
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 2, Window: 24 * time.Hour}
	d, err := l.AllowN(context.Background(), "day", rule, 1)
	if err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	now := time.Now()
	want := now.Truncate(24 * time.Hour).Add(24 * time.Hour).Sub(now)
	if diff := d.ResetAfter - want; diff < -2*time.Second || diff > 2*time.Second {
		t.Errorf("ResetAfter %s, want about %s (next UTC midnight)", d.ResetAfter, want)
	}
}
