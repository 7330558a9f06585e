package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/trace"
	"testing"
)

// TestForwardTrace writes an execution trace of each of
// BenchmarkForwardFloor's four runs (after the same warm-up), to count the
// goroutine hand-offs a call pays: the goroutines made runnable and the
// processors started per call. It does nothing unless RINGLIMIT_TRACE
// names a directory:
//
//	cd bench && RINGLIMIT_TRACE=/tmp/tr go test -run ForwardTrace -v
//	sh handoffs.sh /tmp/tr   # per call: unblocks by netpoll, by a goroutine; Ps started
//
// A trace costs time per event, so figures from a traced run are counts,
// not latencies.
func TestForwardTrace(t *testing.T) {
	dir := os.Getenv("RINGLIMIT_TRACE")
	if dir == "" {
		t.Skip("set RINGLIMIT_TRACE to a directory to write the traces")
	}
	nodes := startSealed(t)
	caller := nodes[0]
	keys := keysOf(caller, nodes[1].Name(), 1024)
	echo := startEcho(t)
	seqConn := echo.dial(t)
	defer seqConn.Close()
	mux := newMuxClient(echo.dial(t))
	defer mux.close()
	if _, err := seqRinglimit(caller, keys, 2000); err != nil {
		t.Fatal(err)
	}
	if _, err := muxRinglimit(caller, keys, 20000); err != nil {
		t.Fatal(err)
	}
	if _, err := seqFloor(seqConn, 2000); err != nil {
		t.Fatal(err)
	}
	if _, err := muxFloor(mux, 20000); err != nil {
		t.Fatal(err)
	}
	const calls = 5000
	for _, run := range []struct {
		name string
		f    func() error
	}{
		{"floor1", func() error { _, err := seqFloor(seqConn, calls); return err }},
		{"ring1", func() error { _, err := seqRinglimit(caller, keys, calls); return err }},
		{"floor32", func() error { _, err := muxFloor(mux, calls); return err }},
		{"ring32", func() error { _, err := muxRinglimit(caller, keys, calls); return err }},
	} {
		f, err := os.Create(filepath.Join(dir, run.name+".trace"))
		if err != nil {
			t.Fatal(err)
		}
		if err := trace.Start(f); err != nil {
			t.Fatal(err)
		}
		r0, w0 := syscalls()
		err = run.f()
		r1, w1 := syscalls()
		trace.Stop()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.2f reads, %.2f writes (system calls, both ends) per call", run.name, float64(r1-r0)/calls, float64(w1-w0)/calls)
		if err := os.WriteFile(filepath.Join(dir, run.name+".calls"), fmt.Appendf(nil, "%d\n", calls), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
