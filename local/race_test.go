//go:build race

package local

// raceEnabled: the race detector pads the smallest allocations.
const raceEnabled = true
