//go:build !linux

package sandboxinit

import (
	"fmt"
	"os"

	"github.com/cordon-sandbox/cordon/agent/startup"
)

// Main refuses: sandboxes are built from Linux namespaces.
func Main(start StartAgent) int {
	fmt.Fprintln(os.Stderr, "cordon-agent sandbox-init: runs only on Linux")
	return 1
}

// LandlockABI is 0 off Linux.
func LandlockABI() int { return 0 }

// Hold refuses likewise.
func Hold() int { return Main(nil) }

// Spawner refuses likewise.
func Spawner() int { return Main(nil) }

// ContainerOptions confines nothing off Linux (where the agent refuses to
// run anyway).
func ContainerOptions(env []string) (startup.Options, error) { return startup.Options{}, nil }
