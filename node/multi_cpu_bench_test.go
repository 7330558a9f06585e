//go:build linux

package node_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit"
)

// BenchmarkAllowAllSideBySide measures the bound on an owned key
// (AllowAll with 2 rules ≤ 1.5× one AllowN) in interleaved rounds: 1024
// keys, AllowN then AllowAll-2 then AllowAll-2 writing into the caller's
// slice, round after round, so that a machine loaded by other work shifts
// them alike. Each round is timed in wall time (which counts the garbage
// collector's work that AllowAll's result costs on the other threads) and
// in the calling thread's CPU time. It reports the medians and the median
// of the per-round ratios.
func BenchmarkAllowAllSideBySide(b *testing.B) {
	c := settled(b, 2, nil)
	a := c.Nodes[0]
	keys := keysOwnedBy(a, a.Name(), 1024)
	rules := []ringlimit.Rule{{Limit: 1 << 40, Window: time.Second}, {Limit: 1 << 30, Window: time.Minute}}
	var buf [ringlimit.MaxRules]ringlimit.Decision
	i := 0
	cases := []func(){
		func() { a.AllowN(ctx, keys[i&1023], rules[0], 1); i++ },
		func() { a.AllowAll(ctx, keys[i&1023], rules, 1); i++ },
		func() { a.AppendAll(ctx, buf[:0], keys[i&1023], rules, 1); i++ },
	}
	wall, cpu := interleaved(b, 20000, cases...)
	for k, name := range []string{"AllowN", "AllowAll", "AppendAll"} {
		b.ReportMetric(median(wall[k]), name+"-ns")
		b.ReportMetric(median(cpu[k]), name+"-cpu-ns")
		if k > 0 {
			b.ReportMetric(medianRatio(wall, k, 0), name+"/AllowN")
			b.ReportMetric(medianRatio(cpu, k, 0), name+"-cpu/AllowN")
		}
	}
}
