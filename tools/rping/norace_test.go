//go:build !race

package rping

const raceEnabled = false
