package metrics_test

import (
	"fmt"
	"log"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/metrics"
	"github.com/ringlimit/ringlimit/node"
)

func Example() {
	n, err := node.New(node.Config{Name: "api-1", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0"})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	if err := metrics.Register(reg, n); err != nil {
		log.Fatal(err)
	}
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 2, Window: time.Minute}
	for range 3 {
		n.Allow(ctx, "user:42", rule)
	}
	fams, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "ringlimit_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				l := m.GetLabel() // sorted by name: result, source
				fmt.Printf("%s %s %s: %v\n", f.GetName(), l[0].GetValue(), l[1].GetValue(), v)
			}
		}
	}
	// Output:
	// ringlimit_decisions_total allowed local: 2
	// ringlimit_decisions_total denied local: 1
}

// Handler serves a node's series (with a Middleware's and a Watcher's, if
// given) on a registry of its own: mount it at /metrics.
func ExampleHandler() {
	n, err := node.New(node.Config{Name: "api-1", GossipAddr: "127.0.0.1:0", RPCAddr: "127.0.0.1:0"})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	h, err := metrics.Handler(n, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	fmt.Println(rec.Code, strings.Contains(rec.Body.String(), `ringlimit_decisions_total{result="allowed",source="local"} 0`))
	// Output: 200 true
}
