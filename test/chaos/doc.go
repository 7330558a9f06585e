// Package chaos holds the failure tests of ringlimit: real node processes
// (./chaosnode) and a real Valkey or Redis server on loopback, load through
// the nodes' HTTP decision endpoint, and real SIGKILL, SIGSTOP and SIGTERM.
// Each scenario prints one row of a table of figures; see RESULTS.md.
//
//	go test -v -count=1 ./test/chaos/          # the full suite (a few minutes)
//	go test -v -count=1 -short ./test/chaos/   # shorter faults
//
// It has no code of its own outside its tests.
package chaos
