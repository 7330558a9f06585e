// Package ring maps keys to the members of a cluster and keeps that map
// current as members come and go.
//
// A Ring is an immutable consistent-hash ring: New places DefaultVirtualNodes
// (256) virtual nodes per member, hashed with xxhash, and Owner finds a key's
// member with a binary search that allocates nothing. The same set of
// members gives the same owners on every node, whatever order the names come
// in. Adding a member to n moves about 1/(n+1) of the keys, all to the new
// member; removing one moves only the keys it owned. Owners lists the next
// distinct members of a key, which take its keys over when its owner leaves.
//
// A Membership joins this process to a gossip cluster (hashicorp/memberlist:
// SWIM failure detection, optional AES-GCM encryption and a cluster label)
// and publishes a new Ring on every change through an atomic pointer, so
// lookups take no lock. Each member publishes its peer RPC address in its
// metadata (Membership.RPCAddr). Config.OnChange reports which members came
// and went. A reconnect loop re-joins members that failed, so the two halves
// of a healed partition merge again within a few reconnect intervals.
// Config.Seeds may be DNS names (a Kubernetes headless Service): while a
// member is alone or has lost members it resolves them again every
// SeedInterval and joins the addresses it does not know, so a cluster whose
// every member restarted with new addresses forms again.
//
// DefaultLANConfig suits a local network; FastLocalConfig suits tests and
// small clusters on one host, where a killed member is declared failed in
// about half a second.
package ring
