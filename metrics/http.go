package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/rules"
)

// RegisterMiddleware registers m's series with reg, read from m when reg is
// gathered: per rule (labelled by rule name, never by key),
// ringlimit_http_requests_total{rule,result} and
// ringlimit_near_limit_total{rule}, every rule in force present from the
// first scrape; and ringlimit_http_key_errors_total,
// ringlimit_http_limiter_errors_total and ringlimit_http_delay_expired_total.
// Several Middlewares in one registry: register each through
// prometheus.WrapRegistererWith with a label of its own.
func RegisterMiddleware(reg prometheus.Registerer, m *httplimit.Middleware) error {
	if reg == nil || m == nil {
		return fmt.Errorf("metrics: register middleware: %w", ErrNil)
	}
	if err := reg.Register(newHTTPCollector(m)); err != nil {
		return fmt.Errorf("metrics: register middleware: %w", err)
	}
	return nil
}

type httpCollector struct {
	m                                   *httplimit.Middleware
	requests, nearLimit                 *prometheus.Desc
	keyErrors, limiterErrors, delayDone *prometheus.Desc
}

func newHTTPCollector(m *httplimit.Middleware) *httpCollector {
	return &httpCollector{
		m: m,
		requests: prometheus.NewDesc("ringlimit_http_requests_total",
			"Each rule's decisions on the requests it applied to. allowed: it admitted the request; denied: it denied it and the request was refused; "+
				"shadow_denied: it denied it but the request was passed on (a shadow rule, or the middleware in shadow mode).",
			[]string{"rule", "result"}, nil),
		nearLimit: prometheus.NewDesc("ringlimit_near_limit_total",
			"Each rule's allowed decisions that left less than 20 % of its limit remaining.",
			[]string{"rule"}, nil),
		keyErrors: prometheus.NewDesc("ringlimit_http_key_errors_total",
			"Requests without a usable rate-limit key.", nil, nil),
		limiterErrors: prometheus.NewDesc("ringlimit_http_limiter_errors_total",
			"Requests the limiter could not decide (failed open or answered 500).", nil, nil),
		delayDone: prometheus.NewDesc("ringlimit_http_delay_expired_total",
			"Requests whose context ended while waiting out a leaky bucket's delay.", nil, nil),
	}
}

func (c *httpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.nearLimit
	ch <- c.keyErrors
	ch <- c.limiterErrors
	ch <- c.delayDone
}

func (c *httpCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.m.RuleStats() {
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(r.Allowed), r.Name, "allowed")
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(r.Denied), r.Name, "denied")
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(r.ShadowDenied), r.Name, "shadow_denied")
		ch <- prometheus.MustNewConstMetric(c.nearLimit, prometheus.CounterValue, float64(r.NearLimit), r.Name)
	}
	s := c.m.Stats()
	ch <- prometheus.MustNewConstMetric(c.keyErrors, prometheus.CounterValue, float64(s.KeyErrors))
	ch <- prometheus.MustNewConstMetric(c.limiterErrors, prometheus.CounterValue, float64(s.LimiterErrors))
	ch <- prometheus.MustNewConstMetric(c.delayDone, prometheus.CounterValue, float64(s.DelayExpired))
}

// RegisterWatcher registers w's series with reg, read from w when reg is
// gathered: ringlimit_rules_reloads_total{result="success"|"failure"} (a
// failed version of the file counts once) and ringlimit_rules, the number of
// rules in force.
func RegisterWatcher(reg prometheus.Registerer, w *rules.Watcher) error {
	if reg == nil || w == nil {
		return fmt.Errorf("metrics: register watcher: %w", ErrNil)
	}
	c := &watchCollector{w: w,
		reloads: prometheus.NewDesc("ringlimit_rules_reloads_total",
			"Reloads of the rule file: success, a new set of rules swapped in; failure, a version of the file that could not be read or parsed (the last good rules stay).",
			[]string{"result"}, nil),
		rules: prometheus.NewDesc("ringlimit_rules", "Rules in force.", nil, nil),
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: register watcher: %w", err)
	}
	return nil
}

type watchCollector struct {
	w              *rules.Watcher
	reloads, rules *prometheus.Desc
}

func (c *watchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.reloads
	ch <- c.rules
}

func (c *watchCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.reloads, prometheus.CounterValue, float64(c.w.Reloads()), "success")
	ch <- prometheus.MustNewConstMetric(c.reloads, prometheus.CounterValue, float64(c.w.Errors()), "failure")
	ch <- prometheus.MustNewConstMetric(c.rules, prometheus.GaugeValue, float64(c.w.Current().Len()))
}
