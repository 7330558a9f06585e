package ring

import (
	"net"
	"testing"
)

func TestResolveRPC(t *testing.T) {
	host := net.ParseIP("10.1.2.3")
	for _, c := range []struct{ in, want string }{
		{":7947", "10.1.2.3:7947"},
		{"0.0.0.0:7947", "10.1.2.3:7947"},
		{"[::]:7947", "10.1.2.3:7947"},
		{"127.0.0.1:7947", "127.0.0.1:7947"},
		{"192.168.0.9:1", "192.168.0.9:1"},
		{"", ""},
	} {
		if got := resolveRPC(c.in, host); got != c.want {
			t.Errorf("resolveRPC(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
