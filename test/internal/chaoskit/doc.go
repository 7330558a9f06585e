// Package chaoskit is the harness that test/chaos (node processes on
// loopback) and test/netchaos (node containers on a private Docker
// network) share: the load that calls the nodes and records what they
// answer, the HTTP face of a chaosnode (/v1/allow, /stats, /healthz), the
// waits on what the nodes' rings see, the leak check, the bounds both
// suites assert, and the table of figures both print (see
// test/chaos/RESULTS.md).
//
// It is internal to test/: only the failure suites import it. Nothing in
// it is package state; every Load, Node and Cluster is its caller's.
package chaoskit
