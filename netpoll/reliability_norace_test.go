//go:build !race

package netpoll_test

// raceEnabled: see reliability_race_test.go.
const raceEnabled = false
