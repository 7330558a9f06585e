package peer

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/testclock"
	"github.com/ringlimit/ringlimit/local"
)

// rawLink is an authenticated raw connection to s that reads the
// server's records too.
func rawLink(t *testing.T, s *Server) (net.Conn, *sealer, *reader) {
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	tx, rx, err := clientHandshake(nc, secret, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return nc, tx, &reader{c: nc, open: rx}
}

// limiterAll serves OpAllow and OpAllowAll from a local limiter.
func limiterAll(l *local.Limiter) Handler {
	return handlerFunc(func(r *Request) Result {
		if r.Op == OpAllowAll {
			ds, err := l.AllowAll(context.Background(), r.Key, r.Rules, r.N)
			if err != nil || len(ds) == 0 {
				return Result{Err: err}
			}
			return Result{Decision: ds[0], Decisions: ds}
		}
		d, err := l.AllowN(context.Background(), r.Key, r.Rule, r.N)
		return Result{Decision: d, Err: err}
	})
}

// withWindowMs rewrites the window of rule i of an encoded OpAllow or
// OpAllowAll frame (header included) to ms.
func withWindowMs(t *testing.T, frame []byte, i int, ms uint64) []byte {
	t.Helper()
	b := append([]byte(nil), frame...)
	switch b[1] {
	case typeAllow:
		binary.BigEndian.PutUint64(b[headerLen+1+8:], ms)
	case typeAllowFrom:
		binary.BigEndian.PutUint64(b[headerLen+1+int(b[headerLen])+1+8:], ms)
	case typeAllowAll:
		p := headerLen + 1 + int(b[headerLen]) + 1 + i*ruleLen
		binary.BigEndian.PutUint64(b[p+1+8:], ms)
	default:
		t.Fatalf("type %d", b[1])
	}
	return b
}

// Every rule that validates travels: its frame, AllowN's and AllowAll's,
// parses back to itself, and the owner decides it over a real link. Windows
// from 1 ms to 24 h validate; so does one of 100 years; the largest
// Durations need not.
func TestEveryValidRuleTravels(t *testing.T) {
	l := local.New(local.Config{Clock: testclock.New(time.Now())})
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: limiterAll(l)})
	defer s.Close()
	c := newClient(t, s.Addr().String(), secret, 5*time.Second)
	most := math.MaxInt64 / time.Millisecond * time.Millisecond
	for i, w := range []time.Duration{time.Millisecond, 24 * time.Hour, 100 * 365 * 24 * time.Hour,
		1 << 62 / time.Millisecond * time.Millisecond, 1<<62/time.Millisecond*time.Millisecond + time.Millisecond,
		1752000 * time.Hour, most - time.Millisecond, most} {
		r := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: w}
		if err := r.Validate(); err != nil {
			if w <= 100*365*24*time.Hour {
				t.Fatalf("window %s: %v", w, err)
			}
			continue
		}
		for _, req := range []Request{
			{Op: OpAllow, Key: "k", Rule: r, N: 1},
			{Op: OpAllow, Key: "k", Rule: r, N: 1, From: "n1"},
			{Op: OpAllowAll, Key: "k", Rules: []ringlimit.Rule{rule, r}, N: 1},
		} {
			b := appendRequest(nil, 1, &req)
			got, err := parseRequest(b[1], b[headerLen:])
			if err != nil || !reflect.DeepEqual(got, req) {
				t.Fatalf("window %s: %+v → %+v, %v", w, req, got, err)
			}
		}
		key := string(rune('a' + i))
		res, err := c.Do(context.Background(), &Request{Op: OpAllow, Key: key, Rule: r, N: 1})
		if err != nil || res.Err != nil || !res.Decision.Allowed {
			t.Fatalf("AllowN, window %s: %+v, %v", w, res, err)
		}
		res, err = c.Do(context.Background(), &Request{Op: OpAllowAll, Key: "all" + key, Rules: []ringlimit.Rule{rule, r}, N: 1})
		if err != nil || res.Err != nil || len(res.Decisions) != 2 || !res.Decisions[1].Allowed {
			t.Fatalf("AllowAll, window %s: %+v, %v", w, res, err)
		}
	}
	if st := s.Stats(); st.RejectedFrames != 0 {
		t.Fatalf("frames rejected: %+v", st)
	}
}

// A well-formed frame whose call is bad (a window no rule may have, as a
// node of another release might send; a count of rules out of range) is
// answered with ErrInvalidRule, and the connection carries on: the calls
// after it on the same connection are served.
func TestBadCallKeepsTheConnection(t *testing.T) {
	l := local.New(local.Config{Clock: testclock.New(time.Now())})
	s := Serve(listen(t), ServerConfig{Secret: secret, Handler: limiterAll(l)})
	defer s.Close()
	nc, tx, rd := rawLink(t, s)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))

	over := uint64(ringlimit.MaxWindow/time.Millisecond) + 1
	most := uint64(math.MaxInt64 / int64(time.Millisecond)) // the largest Duration, in ms
	allow := appendRequest(nil, 1, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1})
	from := appendRequest(nil, 1, &Request{Op: OpAllow, Key: "k", Rule: rule, N: 1, From: "n1"})
	all := appendRequest(nil, 1, &Request{Op: OpAllowAll, Key: "k", Rules: []ringlimit.Rule{rule, rule}, N: 1})
	nine := appendRequest(nil, 1, &Request{Op: OpAllowAll, Key: "k", Rules: make([]ringlimit.Rule, ringlimit.MaxRules+1), N: 1})
	bad := map[string][]byte{
		"window over MaxWindow":          withWindowMs(t, allow, 0, over),
		"window of the largest Duration": withWindowMs(t, allow, 0, most),
		"window beyond any Duration":     withWindowMs(t, allow, 0, math.MaxInt64),
		"negative window":                withWindowMs(t, allow, 0, math.MaxUint64),
		"redirected, window over":        withWindowMs(t, from, 0, most),
		"allow-all, rule 1 over":         withWindowMs(t, all, 1, most),
		"allow-all, nine rules":          nine,
	}
	id := uint64(100)
	for name, frame := range bad {
		id++
		binary.BigEndian.PutUint64(frame[6:14], id)
		good := appendRequest(nil, id+1000, &Request{Op: OpAllow, Key: "good-" + name, Rule: rule, N: 1})
		if _, err := nc.Write(append(record(tx, frame), record(tx, good)...)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for want := range 2 {
			typ, gotID, body, err := rd.next()
			if err != nil {
				t.Fatalf("%s: the connection broke: %v", name, err)
			}
			res, err := parseResult(body)
			if typ != typeResult || err != nil {
				t.Fatalf("%s: type %d, %v", name, typ, err)
			}
			switch {
			case want == 0 && (gotID != id || !errors.Is(res.Err, ringlimit.ErrInvalidRule)):
				t.Fatalf("%s: answer %d %+v, want ErrInvalidRule for %d", name, gotID, res, id)
			case want == 1 && (gotID != id+1000 || res.Err != nil || !res.Decision.Allowed):
				t.Fatalf("%s: the call after it: %d %+v", name, gotID, res)
			}
		}
	}
	if st := s.Stats(); st.RejectedFrames != 0 || st.Conns != 1 {
		t.Fatalf("stats %+v: want no rejected frame and the one connection", st)
	}
}
