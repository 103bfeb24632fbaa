//go:build !linux

package agent

import (
	"fmt"
	"github.com/cordon-sandbox/cordon/agent/startup"
	"io"
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

// Start refuses likewise.
func Start(env []string, scrub bool, stdout, stderr io.Writer, opts Options) (func() int, int) {
	return nil, Main(stdout, stderr, opts)
}

// Options are what an embedding adds to Run (startup.Options).
type Options = startup.Options

// TokenFileToFD refuses likewise.
func TokenFileToFD() error { return fmt.Errorf("cordon-agent: runs only on Linux") }

// Install refuses likewise.
func Install(dest string) error { return fmt.Errorf("cordon-agent: runs only on Linux") }

// Accounts refuses likewise.
func Accounts(uid int, dir string) error { return fmt.Errorf("cordon-agent: runs only on Linux") }
