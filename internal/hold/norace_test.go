//go:build !race

package hold

const raceEnabled = false
