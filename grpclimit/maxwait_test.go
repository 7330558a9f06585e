package grpclimit_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/local"
	"google.golang.org/grpc"
)

// boundWaiter admits everything and records how long each wait's context
// allowed (-1: no deadline).
type boundWaiter struct{ bound []time.Duration }

func (w *boundWaiter) WaitN(ctx context.Context, _ string, _ ringlimit.Rule, _ int64) (ringlimit.Decision, error) {
	b := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		b = time.Until(dl)
	}
	w.bound = append(w.bound, b)
	return ringlimit.Decision{Allowed: true}, nil
}

// A call with no deadline waits at most the interceptors' maximum
// (DefaultMaxWait, 30 s, unless WithMaxWait; unbounded if negative); an
// earlier deadline of its own stands, and the call itself goes under its
// own context. (Before, a call with no deadline waited unbounded.) In a
// synctest bubble, so the bounds are exact.
func TestClientMaxWait(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second}
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			name string
			opts []grpclimit.ClientOption
			own  time.Duration // the call's own deadline from now; 0: none
			want time.Duration
		}{
			{"default", nil, 0, grpclimit.DefaultMaxWait},
			{"set", []grpclimit.ClientOption{grpclimit.WithMaxWait(250 * time.Millisecond)}, 0, 250 * time.Millisecond},
			{"own deadline earlier", []grpclimit.ClientOption{grpclimit.WithMaxWait(250 * time.Millisecond)}, 100 * time.Millisecond, 100 * time.Millisecond},
			{"unbounded", []grpclimit.ClientOption{grpclimit.WithMaxWait(-1)}, 0, -1},
		} {
			for _, kind := range []string{"unary", "stream"} {
				w := &boundWaiter{}
				ctx := context.Background()
				if c.own > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.own)
					defer cancel()
				}
				var callHas bool // the call's context has a deadline
				if kind == "unary" {
					ic := grpclimit.UnaryClientInterceptor(w, "out", rule, nil, c.opts...)
					err := ic(ctx, "/s/m", nil, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
						_, callHas = ctx.Deadline()
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				} else {
					ic := grpclimit.StreamClientInterceptor(w, "out", rule, nil, c.opts...)
					_, err := ic(ctx, &grpc.StreamDesc{}, nil, "/s/m", func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
						_, callHas = ctx.Deadline()
						return nil, nil
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				if w.bound[0] != c.want {
					t.Errorf("%s, %s: the wait was bounded by %s, want %s", c.name, kind, w.bound[0], c.want)
				}
				if callHas != (c.own > 0) {
					t.Errorf("%s, %s: the call's context has a deadline %v, want %v", c.name, kind, callHas, c.own > 0)
				}
			}
		}
	})
}

// A turn past the maximum fails at once with ErrWaitTooLong, consuming
// nothing: on 1 per 100 ms, with 250 ms at most, a call whose turn is
// 300 ms off.
func TestClientMaxWaitRefusesALongQueue(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 10, Window: time.Second, Burst: 1}
	synctest.Test(t, func(t *testing.T) {
		l := local.New(local.Config{})
		for range 3 { // turns at 0, 100 and 200 ms, reserved by others
			if _, err := l.ReserveN(time.Now(), "out:/s/m", rule, 1, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}
		ic := grpclimit.UnaryClientInterceptor(l, "out", rule, nil, grpclimit.WithMaxWait(250*time.Millisecond))
		sent := false
		err := ic(context.Background(), "/s/m", nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			sent = true
			return nil
		})
		if !errors.Is(err, ringlimit.ErrWaitTooLong) || sent {
			t.Fatalf("a turn 300 ms off, 250 ms at most: %v, sent %v; want ErrWaitTooLong, not sent", err, sent)
		}
		if d, _ := l.Peek(context.Background(), "out:/s/m", rule); d.RetryAfter != 300*time.Millisecond {
			t.Fatalf("the refused call consumed: next turn in %s, want 300 ms", d.RetryAfter)
		}
	})
}
