package remote

import (
	"crypto/tls"
	"slices"
	"testing"
	"time"
)

// Options map onto the client's options field by field: addresses (one
// server or a cluster's seeds), AUTH, TLS, and Sentinel, which takes the
// place of the addresses.
func TestOptionsMapOntoTheClient(t *testing.T) {
	tc := &tls.Config{ServerName: "store"}
	o := Options{Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379"}, Username: "u", Password: "p", TLS: tc}
	c := o.client()
	if !slices.Equal(c.InitAddress, o.Addrs) || c.Username != "u" || c.Password != "p" || c.TLSConfig != tc {
		t.Fatalf("server options: %+v", c)
	}
	if !c.DisableCache || c.ForceSingleClient || c.Dialer.Timeout != time.Second {
		t.Fatalf("defaults: cache off %v, single %v, dial timeout %s", c.DisableCache, c.ForceSingleClient, c.Dialer.Timeout)
	}
	if c := (Options{Addrs: []string{"10.0.0.1:6379"}}).client(); !c.ForceSingleClient {
		t.Fatal("one address is not taken as one server")
	}
	if c := (Options{Addrs: []string{"10.0.0.1:6379"}, Cluster: true}).client(); c.ForceSingleClient {
		t.Fatal("a single cluster seed is taken as one server")
	}
	st := &tls.Config{ServerName: "sentinel"}
	o.Sentinel = SentinelOptions{MasterSet: "rl", Addrs: []string{"10.0.1.1:26379"}, Username: "su", Password: "sp", TLS: st}
	o.DialTimeout = 3 * time.Second
	c = o.client()
	if c.ForceSingleClient || !slices.Equal(c.InitAddress, []string{"10.0.1.1:26379"}) || c.Sentinel.MasterSet != "rl" ||
		c.Sentinel.Username != "su" || c.Sentinel.Password != "sp" || c.Sentinel.TLSConfig != st ||
		c.Password != "p" || c.TLSConfig != tc || c.Dialer.Timeout != 3*time.Second {
		t.Fatalf("sentinel options: %+v", c)
	}
}
