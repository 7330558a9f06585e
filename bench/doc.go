// Package bench measures ringlimit's in-memory limiter side by side with the
// peers users compare it with: sethvargo/go-limiter's memorystore and a map
// of golang.org/x/time/rate limiters behind one mutex. It is its own module
// so that the peers never become dependencies of the library.
//
// `go test -run .` checks that every peer limits (a quick smoke run).
// `RINGLIMIT_SCALE=1 go test -run Scale -v -timeout 60m` runs the full study
// of docs/benchmarks.md's "cost as the work grows" tables: ns per decision at 1k, 10k,
// 100k, 1M and 4M keys, serially and with 2 goroutines, 5 interleaved
// repetitions, medians and ratios; bytes per key; and it fails if ringlimit
// is slower than a peer at 10k or 1M keys.
//
// `RINGLIMIT_FORWARD=1 go test -run ForwardCost -v -timeout 30m` runs the
// forwarding study: CPU per forwarded decision of a node with 32 callers,
// every node of the cluster in its own process, at 2, 4, 8 and 16 nodes,
// with the read and write system calls per decision; 5 interleaved
// repetitions, medians. RINGLIMIT_VS=<another build of this test binary>
// runs that build's clusters beside these, for a before and after.
//
// `go test -run X -bench ForwardFloor` sets ringlimit's forwarded
// decisions, through a 3-node sealed cluster in this process, beside the
// echo floors on one loopback connection (one caller's sequential round
// trips; 32 callers multiplexed), in three interleaved rounds, and prints the
// median ratios: p50 for 1 caller, throughput for 32 (issue 31).
package bench
