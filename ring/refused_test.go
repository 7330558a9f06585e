package ring

import (
	"log/slog"
	"net"
	"testing"
	"time"
)

// slowProbes makes memberlist take a minute to declare anyone failed, so
// that only Refused can drop a member within a test.
func slowProbes(_ int, c *Config) {
	c.ProbeInterval = 30 * time.Second
	c.ProbeTimeout = 10 * time.Second
	c.SuspicionMult = 4
}

func checksDone(m *Membership) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.checking) == 0
}

// TestRefusedDropsAGoneMember: a member whose process is gone (its gossip
// port closed) is dropped at once when a call to it was refused, with its
// cause logged; a live one that Refused is told of stays, however often.
func TestRefusedDropsAGoneMember(t *testing.T) {
	logs := &dropLog{}
	ms := startCluster(t, 3, func(i int, c *Config) {
		slowProbes(i, c)
		if i == 0 {
			c.Logger = slog.New(logs)
		}
	})
	a, live, gone := ms[0], ms[1], ms[2]
	for range 3 {
		a.Refused(live.Name())
		a.Refused(a.Name())
	}
	waitFor(t, 5*time.Second, "the checks done", func() bool { return checksDone(a.Membership) })
	if !a.Ring().Contains(live.Name()) {
		t.Fatal("a live member was dropped on Refused")
	}
	if err := gone.Shutdown(); err != nil {
		t.Fatal(err)
	}
	a.Refused(gone.Name())
	waitFor(t, 5*time.Second, "the gone member dropped", func() bool { return !a.Ring().Contains(gone.Name()) })
	if !a.Ring().Contains(live.Name()) || a.Ring().Len() != 2 {
		t.Fatalf("ring after the drop: %d members", a.Ring().Len())
	}
	if got := logs.got(); len(got) != 1 || got[0] != "WARN "+gone.Name()+" refused" {
		t.Fatalf("drops logged: %q, want one of %s, refused", got, gone.Name())
	}
	// live still has it: memberlist has not declared it failed.
	if !live.Ring().Contains(gone.Name()) {
		t.Fatal("the member not told of the refusal dropped it too")
	}
}

// TestRefusedMemberComesBack: a member dropped on a refusal goes back on
// the ring once its gossip port accepts again while memberlist still holds
// it alive (here a listener stands in for its restarted process).
func TestRefusedMemberComesBack(t *testing.T) {
	ms := startCluster(t, 2, slowProbes)
	a, b := ms[0], ms[1]
	addr := b.GossipAddr()
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	a.Refused(b.Name())
	waitFor(t, 5*time.Second, "b dropped", func() bool { return !a.Ring().Contains(b.Name()) })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port of the member shut down is taken meanwhile: %v", err)
	}
	// Like memberlist, it reads what comes and keeps the connection open
	// meanwhile (one accepted and then closed at once is a dying
	// process's).
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	defer func() {
		ln.Close()
		<-accepted
		for _, c := range conns {
			c.Close()
		}
	}()
	waitFor(t, 5*time.Second, "b back on the ring", func() bool { return a.Ring().Contains(b.Name()) })
	waitFor(t, 5*time.Second, "the watch done", func() bool { return checksDone(a.Membership) })
}

// TestRefusesTellsTheDyingFromTheLive: a port with no listener, and a
// listener that accepts and closes at once (a process dying), are gone; a
// listener that accepts and holds the connection (memberlist), or one that
// never accepts (a stopped process: the kernel accepts for it), is not.
func TestRefusesTellsTheDyingFromTheLive(t *testing.T) {
	m := &Membership{cfg: FastLocalConfig("x")}
	m.cfg.TCPTimeout = time.Minute // (the wait is at most half of it)
	listen := func(serve func(net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var held []net.Conn
		done := make(chan struct{})
		go func() {
			defer close(done)
			if serve == nil {
				return // never accepts
			}
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				held = append(held, c)
				serve(c)
			}
		}()
		t.Cleanup(func() {
			ln.Close()
			<-done
			for _, c := range held {
				c.Close()
			}
		})
		return ln.Addr().String()
	}
	holds := listen(func(net.Conn) {})
	// A port nobody listens on: take one and let it go.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := ln.Addr().String()
	ln.Close()
	for _, c := range []struct {
		name string
		addr string
		wait time.Duration // for the reset: on a busy host the listener's goroutine may be late
		want verdict
	}{
		{"nothing listens", free, 50 * time.Millisecond, gone},
		{"accepts and closes at once", listen(func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }), 10 * time.Second, gone},
		{"accepts and holds", holds, 50 * time.Millisecond, listened},
		{"never accepts", listen(nil), 50 * time.Millisecond, listened},
	} {
		refusedReadWait = c.wait
		got := m.check(c.addr)
		refusedReadWait = 50 * time.Millisecond
		if got != c.want {
			t.Errorf("%s: check = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStalledMemberDoesNotTrustARefusal: a member descheduled lately (see
// Config.Stalled) drops nobody on a refusal: its own checks may have been
// late. Gossip decides.
func TestStalledMemberDoesNotTrustARefusal(t *testing.T) {
	ms := startCluster(t, 2, func(i int, c *Config) {
		slowProbes(i, c)
		if i == 0 {
			c.Stalled = func() time.Duration { return 400 * time.Millisecond }
		}
	})
	a, b := ms[0], ms[1]
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	a.Refused(b.Name())
	waitFor(t, 5*time.Second, "the check done", func() bool { return checksDone(a.Membership) })
	if !a.Ring().Contains(b.Name()) {
		t.Fatal("a member that runs late dropped another on a refusal")
	}
}
