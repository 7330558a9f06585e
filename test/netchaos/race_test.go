//go:build race

package netchaos

func init() { raceEnabled = true }
