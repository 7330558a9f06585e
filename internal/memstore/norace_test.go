//go:build !race

package memstore

// raceEnabled: the race detector pads the smallest allocations.
const raceEnabled = false
