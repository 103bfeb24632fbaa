//go:build !linux

package sandboxinit

import (
	"fmt"
	"os"

	"github.com/cordon-sandbox/cordon/agent"
)

// Main refuses: sandboxes are built from Linux namespaces.
func Main() int {
	fmt.Fprintln(os.Stderr, "cordon-agent sandbox-init: runs only on Linux")
	return 1
}

// LandlockABI is 0 off Linux.
func LandlockABI() int { return 0 }

// Hold refuses likewise.
func Hold() int { return Main() }

// Spawner refuses likewise.
func Spawner() int { return Main() }

// ContainerOptions confines nothing off Linux (where the agent refuses to
// run anyway).
func ContainerOptions(env []string) (agent.Options, error) { return agent.Options{}, nil }
