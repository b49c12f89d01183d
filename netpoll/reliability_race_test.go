//go:build race

package netpoll_test

// raceEnabled: the race detector slows the tests down several times and
// caps a process at 8128 live goroutines, so the soak runs smaller.
const raceEnabled = true
