package main

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ringlimit/ringlimit/ringlimitd/internal/config"
)

// observer holds ringlimitd's own series. Labels name domains and
// descriptor keys of the config (never a descriptor's value, and never a
// domain the config does not hold: those count under domain ""), so their
// number is bounded by the config.
type observer struct {
	requests    *prometheus.CounterVec
	descriptors *prometheus.CounterVec
	loads       *prometheus.CounterVec
	domains     prometheus.Gauge
}

func newObserver(reg prometheus.Registerer) (*observer, error) {
	o := &observer{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimitd_requests_total",
			Help: "ShouldRateLimit requests answered (gRPC and /json), by config domain (\"\" for one the config does not hold) and overall code: ok or over_limit.",
		}, []string{"domain", "code"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimitd_descriptors_total",
			Help: "Descriptors decided, by config domain, config descriptor keys (joined by \".\") and code: ok, over_limit, shadow_over_limit, quota_over_limit, unlimited or unmatched.",
		}, []string{"domain", "descriptor", "code"}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ringlimitd_config_loads_total",
			Help: "Config loads, by result: ok, or error (the last good config stays in force).",
		}, []string{"result"}),
		domains: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringlimitd_config_domains",
			Help: "Domains in the config in force.",
		}),
	}
	err := errors.Join(reg.Register(o.requests), reg.Register(o.descriptors), reg.Register(o.loads), reg.Register(o.domains))
	return o, err
}

// Descriptor counts one descriptor's outcome (rls.Observer).
func (o *observer) Descriptor(domain, path, code string) {
	o.descriptors.WithLabelValues(domain, path, code).Inc()
}

// Request counts one request's overall code (rls.Observer).
func (o *observer) Request(domain, code string) {
	o.requests.WithLabelValues(domain, code).Inc()
}

func (o *observer) configLoaded(c *config.Config, err error) {
	if err != nil {
		o.loads.WithLabelValues("error").Inc()
		return
	}
	o.loads.WithLabelValues("ok").Inc()
	o.domains.Set(float64(c.Domains()))
}
