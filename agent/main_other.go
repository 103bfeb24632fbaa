//go:build !linux

package agent

import (
	"fmt"
	"io"
	"net"
)

// Main refuses to run: the agent's process ownership and path jail are
// built on Linux interfaces (subreaper, openat2, /proc).
func Main(stdout, stderr io.Writer, opts Options) int {
	fmt.Fprintln(stderr, "cordon-agent: runs only on Linux")
	return 1
}

// Run refuses likewise.
func Run(env []string, scrub bool, stdout, stderr io.Writer, opts Options) int {
	return Main(stdout, stderr, opts)
}

// Options are what an embedding adds to Run.
type Options struct {
	CommandThread   func(func())
	CommandThreadID int
	Ready           func(record []byte)
	Listener        net.Listener
}
