//go:build cgo

package sandboxinit

// cgoBuild: this agent is built with cgo, whose runtime refuses
// syscall.AllThreadsSyscall; the init then confines one thread and execs
// the agent on it. (A cgo-enabled build that links no C at all would allow
// the call: it merely takes the slower path.)
const cgoBuild = true
