package grpclimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Waiter waits until a limit admits n hits and takes them. It has the method
// of ringlimit.Waiter, so whatever implements that (a cluster's node, to wait
// on the fleet's limit) implements this.
type Waiter interface {
	// WaitN blocks until n hits on key are admitted by rule and consumes
	// them, or returns an error: ctx's, or one wrapping ringlimit's
	// sentinels for bad input.
	WaitN(ctx context.Context, key string, rule ringlimit.Rule, n int64) (ringlimit.Decision, error)
}

// DefaultMaxWait is how long the client interceptors wait for a call's
// turn at most, unless WithMaxWait says otherwise. Without a bound, a call
// whose context had no deadline waited as long as the queue ahead of it
// reached (a bucket's reaches centuries), holding its caller unseen. 30 s
// is about the longest deadline gRPC callers commonly give a call, so a
// call that waits longer has usually been given up on; a throttle that
// queues normally waits far less.
const DefaultMaxWait = 30 * time.Second

// ClientOption configures UnaryClientInterceptor and StreamClientInterceptor.
type ClientOption func(*waiting)

// WithMaxWait bounds the wait for a call's turn: a call whose context has
// no deadline, or a later one, waits at most max, and one whose turn is
// further off fails at once (its error wraps ringlimit.ErrWaitTooLong),
// consuming nothing. If zero, DefaultMaxWait; if negative, only the call's
// context bounds the wait.
func WithMaxWait(max time.Duration) ClientOption { return func(c *waiting) { c.max = max } }

// UnaryClientInterceptor returns a client interceptor that takes one hit of
// rule from w before each unary call, waiting as long as the call's context
// allows, and at most DefaultMaxWait (see WithMaxWait). Hits count on "name:" and the key of key (if nil, Method: every
// call of a method shares one limit; Metadata reads the incoming metadata,
// so a server that calls on keys by its own caller's value). A call whose
// wait fails is not sent:
// its error wraps WaitN's (ctx.Err() for a context that ended, or a
// ringlimit sentinel); a key function's error wraps ErrNoKey.
func UnaryClientInterceptor(w Waiter, name string, rule ringlimit.Rule, key KeyFunc, opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := newWaiting(w, name, rule, key, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := c.wait(ctx, method); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams: a stream
// takes one hit before it opens.
func StreamClientInterceptor(w Waiter, name string, rule ringlimit.Rule, key KeyFunc, opts ...ClientOption) grpc.StreamClientInterceptor {
	c := newWaiting(w, name, rule, key, opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if err := c.wait(ctx, method); err != nil {
			return nil, err
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
}

type waiting struct {
	w    Waiter
	name string
	rule ringlimit.Rule
	key  KeyFunc
	max  time.Duration // the longest wait; negative: none
}

func newWaiting(w Waiter, name string, rule ringlimit.Rule, key KeyFunc, opts []ClientOption) *waiting {
	c := &waiting{w: w, name: name, rule: rule, key: key}
	for _, o := range opts {
		o(c)
	}
	if c.max == 0 {
		c.max = DefaultMaxWait
	}
	return c
}

func (c *waiting) wait(ctx context.Context, method string) error {
	k := method
	if c.key != nil {
		var err error
		if k, err = c.key(ctx, method); err != nil {
			return fmt.Errorf("grpclimit: key for %s: %w", method, err)
		}
	}
	if c.max > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > c.max {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.max) // the wait's only: the call goes under its own
			defer cancel()
		}
	}
	d, err := c.w.WaitN(ctx, c.name+":"+k, c.rule, 1)
	if err != nil {
		return fmt.Errorf("grpclimit: wait for %s: %w", method, err)
	}
	if !d.Allowed { // a Waiter that gave up without an error
		return status.Error(codes.ResourceExhausted, "rate limit exceeded")
	}
	return nil
}
