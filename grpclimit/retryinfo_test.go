package grpclimit_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/grpclimit"
	"github.com/ringlimit/ringlimit/local"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// retryInfo returns the google.rpc.RetryInfo detail of err's status.
func retryInfo(t *testing.T, err error) *errdetails.RetryInfo {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("%v, want ResourceExhausted", err)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri
		}
	}
	t.Fatalf("ResourceExhausted without a RetryInfo detail: %v", st.Details())
	return nil
}

// A refused call, unary or stream, carries google.rpc.RetryInfo, as a real
// client over loopback reads it: its retry_delay is when the call could
// next pass, and the retry-after trailer is that in whole seconds, rounded
// up.
func TestRetryInfo(t *testing.T) {
	// A token bucket of 2 a minute refills one hit every 30 s: a denial
	// right after two calls says to retry in at most 30 s.
	rule := ringlimit.Rule{Algorithm: ringlimit.TokenBucket, Limit: 2, Window: time.Minute}
	lim := grpclimit.New(local.New(local.Config{}), grpclimit.WithRule("api", rule))
	s := serve(t, lim.Unary(), lim.Stream())
	c := s.client(t)
	for i := range 2 {
		if _, _, err := check(t, c); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	_, trl, err := check(t, c)
	ri := retryInfo(t, err)
	delay := ri.GetRetryDelay().AsDuration()
	if delay <= 0 || delay > 30*time.Second {
		t.Errorf("retry_delay %v, want within the 30 s a token takes", delay)
	}
	if got, want := first(trl, "retry-after"), strconv.Itoa(int(math.Ceil(delay.Seconds()))); got != want {
		t.Errorf("retry-after %q beside retry_delay %v: want %s", got, delay, want)
	}

	// A stream opened over the limit: the same detail on Recv's error.
	st, err := c.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Recv()
	if d := retryInfo(t, err).GetRetryDelay().AsDuration(); d <= 0 || d > 30*time.Second {
		t.Errorf("stream: retry_delay %v", d)
	}
}
