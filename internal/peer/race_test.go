//go:build race

package peer

// raceEnabled: the race detector is on, and grows stacks and heap.
const raceEnabled = true
