package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/cordon-sandbox/cordon/agent/wire"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func versionCmd(args []string) int {
	fmt.Printf("cordon %s (agent wire protocol %d, %s, %s/%s, %s build)\n", versionString(), wire.ProtocolVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH, buildName)
	return 0
}
