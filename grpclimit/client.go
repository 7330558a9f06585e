package grpclimit

import (
	"context"
	"fmt"

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

// UnaryClientInterceptor returns a client interceptor that takes one hit of
// rule from w before each unary call, waiting as long as the call's context
// allows. Hits count on "name:" and the key of key (if nil, Method: every
// call of a method shares one limit; Metadata reads the incoming metadata,
// so a server that calls on keys by its own caller's value). A call whose
// wait fails is not sent:
// its error wraps WaitN's (ctx.Err() for a context that ended, or a
// ringlimit sentinel); a key function's error wraps ErrNoKey.
func UnaryClientInterceptor(w Waiter, name string, rule ringlimit.Rule, key KeyFunc) grpc.UnaryClientInterceptor {
	c := waiting{w: w, name: name, rule: rule, key: key}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := c.wait(ctx, method); err != nil {
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams: a stream
// takes one hit before it opens.
func StreamClientInterceptor(w Waiter, name string, rule ringlimit.Rule, key KeyFunc) grpc.StreamClientInterceptor {
	c := waiting{w: w, name: name, rule: rule, key: key}
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
}

func (c *waiting) wait(ctx context.Context, method string) error {
	k := method
	if c.key != nil {
		var err error
		if k, err = c.key(ctx, method); err != nil {
			return fmt.Errorf("grpclimit: key for %s: %w", method, err)
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
