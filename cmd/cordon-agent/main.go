// Command cordon-agent runs inside every cordon sandbox and serves the agent
// wire to the host. It is configured only through CORDON_AGENT_* variables.
// Started with the argument "sandbox-init" (by the process tier), it first
// builds the sandbox around itself, then runs as the agent.
package main

import (
	"fmt"
	"os"

	"github.com/cordon-sandbox/cordon/agent"
	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/agent/startup"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case sandboxinit.Arg:
			os.Exit(sandboxinit.Main(func(env []string, opts startup.Options) (func() int, int) {
				return agent.Start(env, false, os.Stdout, os.Stderr, opts)
			}))
		case sandboxinit.HoldArg:
			os.Exit(sandboxinit.Hold())
		case sandboxinit.SpawnerArg:
			os.Exit(sandboxinit.Spawner())
		}
	}
	// Started by an OCI runtime, the agent may be asked to confine its
	// commands itself (Landlock; see sandboxinit.ContainerOptions).
	opts, err := sandboxinit.ContainerOptions(os.Environ())
	if err != nil {
		fmt.Fprintf(os.Stderr, "cordon-agent: refusing to start: %v\n", err)
		os.Exit(1)
	}
	os.Exit(agent.Main(os.Stdout, os.Stderr, opts))
}
