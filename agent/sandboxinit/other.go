//go:build !linux

package sandboxinit

import (
	"fmt"
	"os"
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
