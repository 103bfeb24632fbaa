// Package startnofile keeps the RLIMIT_NOFILE this process started with.
//
// Go's package syscall raises the soft limit as it is initialised and
// keeps the original to itself (it gives it back to the processes
// syscall.ForkExec starts). This package imports nothing, so it is
// initialised before syscall in any program that links both: packages are
// initialised one at a time, each time the first, in import path order,
// whose imports are done, and one without imports is always ready. Its
// init reads the limit first, with a system call of its own.
package startnofile

// saved is the limit as read (cur, max), written by prlimit.
var saved [2]uint64

var read bool

// Limit is the soft and hard RLIMIT_NOFILE this process started with; ok
// is false where it was not read (an architecture without prlimit here).
func Limit() (cur, max uint64, ok bool) { return saved[0], saved[1], read }
