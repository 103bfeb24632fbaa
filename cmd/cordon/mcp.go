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
	return execSibling("cordon mcp", "cordon-mcp", append([]string{"cordon-mcp"}, args...))
}

// execFull has the full build of cordon, installed beside this one as
// cordon-full, run verb with args (light.go).
func execFull(verb string, args []string) int {
	return execSibling("cordon "+verb, "cordon-full", append([]string{"cordon", verb}, args...))
}

// execSibling replaces this process with the program bin found beside
// cordon, run with argv; what is called for it (cmd) is named if it
// cannot be run.
func execSibling(cmd, bin string, argv []string) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd, err)
		return exitCordon
	}
	path := filepath.Join(filepath.Dir(self), bin)
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "%s: %s: %v (scripts/setup.sh installs it beside cordon)\n", cmd, path, err)
	return exitCordon
}
