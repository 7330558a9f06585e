package grpclimit

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrNilInterceptor is wrapped by Register's error when it is given a nil
// registry or Interceptor.
var ErrNilInterceptor = errors.New("grpclimit: nil registerer or interceptor")

// Register registers i's series with reg, read from i when reg is
// gathered. They are httplimit's series of package metrics
// (RegisterMiddleware) for calls instead of requests, under ringlimit_grpc_
// names: per rule (labelled by rule name, never by key), every rule in force
// present from the first scrape,
//
//	ringlimit_grpc_requests_total{rule,result} counter  each rule's decisions on the calls it applied to:
//	                                                    allowed, denied (the call ended ResourceExhausted),
//	                                                    shadow_denied (denied but passed on: a shadow rule, WithShadow)
//	ringlimit_grpc_near_limit_total{rule}      counter  allowed decisions that left < 20 % of the limit
//
// and for the interceptor as a whole
//
//	ringlimit_grpc_key_errors_total            counter  calls without a usable key (InvalidArgument)
//	ringlimit_grpc_limiter_errors_total        counter  calls the limiter could not decide (Unavailable, or passed WithFailOpen)
//	ringlimit_grpc_delay_expired_total         counter  calls whose deadline ended before a leaky bucket's delay
//
// The node's own series (decisions by source, breakers, members) come from
// metrics.Register. Several Interceptors in one registry: register each
// through prometheus.WrapRegistererWith with a label of its own.
func Register(reg prometheus.Registerer, i *Interceptor) error {
	if reg == nil || i == nil {
		return fmt.Errorf("grpclimit: register: %w", ErrNilInterceptor)
	}
	if err := reg.Register(newCollector(i)); err != nil {
		return fmt.Errorf("grpclimit: register: %w", err)
	}
	return nil
}

type collector struct {
	i                                   *Interceptor
	requests, nearLimit                 *prometheus.Desc
	keyErrors, limiterErrors, delayDone *prometheus.Desc
}

func newCollector(i *Interceptor) *collector {
	return &collector{
		i: i,
		requests: prometheus.NewDesc("ringlimit_grpc_requests_total",
			"Each rule's decisions on the gRPC calls it applied to. allowed: it admitted the call; denied: it denied it and the call ended with ResourceExhausted; "+
				"shadow_denied: it denied it but the call was passed on (a shadow rule, or the interceptor in shadow mode).",
			[]string{"rule", "result"}, nil),
		nearLimit: prometheus.NewDesc("ringlimit_grpc_near_limit_total",
			"Each rule's allowed decisions on gRPC calls that left less than 20 % of its limit remaining.",
			[]string{"rule"}, nil),
		keyErrors: prometheus.NewDesc("ringlimit_grpc_key_errors_total",
			"gRPC calls without a usable rate-limit key (ended with InvalidArgument).", nil, nil),
		limiterErrors: prometheus.NewDesc("ringlimit_grpc_limiter_errors_total",
			"gRPC calls the limiter could not decide (ended with Unavailable, or passed on WithFailOpen).", nil, nil),
		delayDone: prometheus.NewDesc("ringlimit_grpc_delay_expired_total",
			"gRPC calls whose deadline ended before a leaky bucket's delay (ended with ResourceExhausted).", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.nearLimit
	ch <- c.keyErrors
	ch <- c.limiterErrors
	ch <- c.delayDone
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.i.mw.RuleStats() {
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(r.Allowed), r.Name, "allowed")
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(r.Denied), r.Name, "denied")
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(r.ShadowDenied), r.Name, "shadow_denied")
		ch <- prometheus.MustNewConstMetric(c.nearLimit, prometheus.CounterValue, float64(r.NearLimit), r.Name)
	}
	s := c.i.mw.Stats()
	ch <- prometheus.MustNewConstMetric(c.keyErrors, prometheus.CounterValue, float64(s.KeyErrors))
	ch <- prometheus.MustNewConstMetric(c.limiterErrors, prometheus.CounterValue, float64(s.LimiterErrors))
	ch <- prometheus.MustNewConstMetric(c.delayDone, prometheus.CounterValue, float64(s.DelayExpired))
}
