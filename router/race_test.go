//go:build race

package router

// raceEnabled: the race detector allocates and drops sync.Pool items, so
// allocation counts do not hold under it.
const raceEnabled = true
