package httplimit_test

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
)

func TestClientIPKey(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	for _, tc := range []struct {
		name    string
		remote  string
		xff     []string
		trusted bool
		v6bits  int
		want    string
	}{
		{"remote only", "203.0.113.9:5555", nil, false, 0, "203.0.113.9"},
		{"spoofed xff, no trusted proxies", "203.0.113.9:5555", []string{"1.2.3.4"}, false, 0, "203.0.113.9"},
		{"spoofed xff from an untrusted peer", "203.0.113.9:5555", []string{"1.2.3.4"}, true, 0, "203.0.113.9"},
		{"trusted proxy", "10.0.0.1:80", []string{"198.51.100.7"}, true, 0, "198.51.100.7"},
		{"client-written entries are skipped", "10.0.0.1:80", []string{"6.6.6.6, 198.51.100.7, 10.0.0.2"}, true, 0, "198.51.100.7"},
		{"several header lines, last first", "10.0.0.1:80", []string{"6.6.6.6", "198.51.100.7,10.9.9.9"}, true, 0, "198.51.100.7"},
		{"garbage stops at the last trusted hop", "10.0.0.1:80", []string{"198.51.100.7, unknown, 10.0.0.2"}, true, 0, "10.0.0.2"},
		{"only trusted hops", "10.0.0.1:80", []string{"10.0.0.3"}, true, 0, "10.0.0.3"},
		{"trusted, no xff", "10.0.0.1:80", nil, true, 0, "10.0.0.1"},
		{"xff entry with port", "10.0.0.1:80", []string{"198.51.100.7:4711"}, true, 0, "198.51.100.7"},
		{"empty entries", "10.0.0.1:80", []string{"198.51.100.7, ,"}, true, 0, "198.51.100.7"},
		{"ipv6 grouped by /64", "[2001:db8:1:2:3:4:5:6]:443", nil, false, 0, "2001:db8:1:2::/64"},
		{"ipv6 by /48", "[2001:db8:1:2:3:4:5:6]:443", nil, false, 48, "2001:db8:1::/48"},
		{"ipv6 whole", "[2001:db8:1:2:3:4:5:6]:443", nil, false, 128, "2001:db8:1:2:3:4:5:6/128"},
		{"ipv6 zone dropped", "[fe80::1%eth0]:443", nil, false, 0, "fe80::/64"},
		{"ipv4-mapped", "[::ffff:192.0.2.1]:80", nil, false, 0, "192.0.2.1"},
		{"ipv6 trusted proxy, v6 client in xff", "[2001:db8:ffff::1]:443", []string{"[2001:db8:aaaa:bbbb::9]:1234"}, true, 0, "2001:db8:aaaa:bbbb::/64"},
		{"no port", "198.51.100.8", nil, false, 0, "198.51.100.8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := httplimit.ClientIP{IPv6Prefix: tc.v6bits}
			if tc.trusted {
				c.TrustedProxies = proxies
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			got, err := c.Key(r)
			if err != nil || got != tc.want {
				t.Errorf("Key = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "@unix-socket"
	if _, err := (httplimit.ClientIP{}).Key(r); !errors.Is(err, httplimit.ErrNoKey) {
		t.Errorf("bad RemoteAddr: err = %v, want ErrNoKey", err)
	}
}

// Through the middleware: clients in one /64 share a limit, other /64s do
// not, and a spoofed X-Forwarded-For does not escape it.
func TestClientIPLimits(t *testing.T) {
	rule := ringlimit.Rule{Algorithm: ringlimit.FixedWindow, Limit: 1, Window: time.Minute}
	h := httplimit.New(newRecorder(t0), httplimit.WithRule("ip", rule), httplimit.WithClientIP(httplimit.ClientIP{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
	}))(new(counting))
	for _, step := range []struct {
		remote string
		xff    []string
		want   int
	}{
		{"[2001:db8:1:2::1]:1", nil, 200},
		{"[2001:db8:1:2:ffff::9]:1", nil, 429},         // same /64
		{"[2001:db8:1:3::1]:1", nil, 200},              // next /64
		{"203.0.113.5:1", nil, 200},                    //
		{"203.0.113.5:2", []string{"192.0.2.77"}, 429}, // spoofing from an untrusted peer does not help
		{"10.1.1.1:1", []string{"192.0.2.77"}, 200},    // via the proxy, 192.0.2.77 is a new client
		{"10.1.1.1:1", []string{"192.0.2.77"}, 429},
		{"10.1.1.1:1", []string{"203.0.113.5"}, 429}, // the same client through the proxy
	} {
		w := get(h, "/", from(step.remote), header("X-Forwarded-For", step.xff...))
		if w.Code != step.want {
			t.Errorf("%s xff %v: status %d, want %d", step.remote, step.xff, w.Code, step.want)
		}
	}
}

func TestComposeAndHeaderKeys(t *testing.T) {
	k := httplimit.Compose(httplimit.ClientIP{}.Key, httplimit.Route, httplimit.Header("x-tenant"))
	r := httptest.NewRequest("GET", "/a/b", nil)
	if _, err := k(r); !errors.Is(err, httplimit.ErrNoKey) {
		t.Errorf("missing header: err = %v, want ErrNoKey", err)
	}
	r.Header.Set("X-Tenant", "acme")
	if got, err := k(r); got != "192.0.2.1|/a/b|acme" || err != nil {
		t.Errorf("Compose = %q, %v", got, err)
	}
	r.Pattern = "GET /a/{x}"
	if got, _ := httplimit.Route(r); got != "GET /a/{x}" {
		t.Errorf("Route = %q, want the pattern", got)
	}
}
