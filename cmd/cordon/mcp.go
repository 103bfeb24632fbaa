package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// mcpCmd runs cordon-mcp, found beside cordon: the MCP SDK is linked there
// alone, so that no other cordon command pays for its start-up.
func mcpCmd(args []string) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon mcp: %v\n", err)
		return exitCordon
	}
	bin := filepath.Join(filepath.Dir(self), "cordon-mcp")
	if err := syscall.Exec(bin, append([]string{"cordon-mcp"}, args...), os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "cordon mcp: %s: %v (scripts/setup.sh builds it beside cordon)\n", bin, err)
	}
	return exitCordon
}
