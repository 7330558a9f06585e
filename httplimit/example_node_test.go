package httplimit_test

import (
	"context"
	"log"
	"net/http"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/rules"
)

// An HTTP service limited by the cluster, with rules from a file that is
// reloaded while it runs (the README's snippet; compiled, not run: it
// serves until killed).
func ExampleNew_node() {
	ctx := context.Background()
	n, err := node.New(node.Config{Name: "api-1", GossipAddr: "0.0.0.0:7946", RPCAddr: "0.0.0.0:7947"})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	w, err := rules.Watch(ctx, "rules.yaml", rules.WatchConfig{}) // reloads on change, keeps the last good set
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	handler := httplimit.New(n, httplimit.WithRules(w))(mux) // 429 + X-RateLimit-* + RateLimit headers

	log.Fatal(http.ListenAndServe(":8080", handler))
}
