// Package memstore is the in-memory key store behind package local, and
// the seam the node drives it through: besides local's decisions, a
// state's export and import (Take, Import, Export, Has), walks over keys
// (Range, RangeArcs, Drain for the write-behind), merges of states started
// apart (Merge), and the decisions that say whether the key's state was
// here (the Held and If variants). Package local is its public face; its
// documentation gives the algorithms, the bounds, eviction and memory.
package memstore
