package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/failover"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/remote"
)

// The fleet-wide client throttle (the README's worked example): every
// process of the fleet calls the partner's API through a Transport on the
// same store, so together they make at most 100 calls a second, each call
// waiting its turn instead of failing. (It needs a server, so it is
// compiled but not run by go test.)
func ExampleTransport() {
	store := remote.Connect(remote.Options{Addrs: []string{"valkey:6379"}}, remote.Config{}, remote.ConnectConfig{})
	defer store.Close()
	limiter := failover.New(store, failover.Config{Policy: failover.Closed}) // store down: no call rather than too many
	api := &http.Client{Transport: &httplimit.Transport{
		Waiter: limiter,
		Rule:   ringlimit.Rule{Limit: 100, Window: time.Second}, // a token bucket: 100/s, bursts of 100
	}}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "https://api.partner.example/v1/orders", nil)
	if err != nil {
		log.Fatal(err)
	}
	resp, err := api.Do(req) // waits its turn; fails at once if the turn is more than 5 s away
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
}

// One process's throttle, on an in-memory limiter: three calls on one per
// 10 ms, the first at once, so the three take two turns of 10 ms. (The
// limiter keeps time in whole milliseconds: the first call is counted at
// the start of its millisecond, so the turns can end up to 1 ms sooner
// than 20 ms after the start.)
func ExampleTransport_local() {
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer partner.Close()
	api := &http.Client{Transport: &httplimit.Transport{
		Waiter: local.New(local.Config{}),
		Rule:   ringlimit.Rule{Limit: 100, Window: time.Second, Burst: 1},
	}}
	start := time.Now()
	for range 3 {
		resp, err := api.Get(partner.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	fmt.Println(time.Since(start) >= 19*time.Millisecond)
	// Output:
	// 200
	// 200
	// 200
	// true
}
