// Command cordon-agent runs inside every cordon sandbox and serves the agent
// wire to the host. It is configured only through CORDON_AGENT_* variables.
// Started with the argument "sandbox-init" (by the process tier), it first
// builds the sandbox around itself, then runs as the agent. With
// "install DEST" it copies itself to DEST, with "accounts UID DIR" it
// writes the sandbox's passwd and group files to DIR (a cluster's init
// containers).
package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/cordon-sandbox/cordon/agent"
	"github.com/cordon-sandbox/cordon/agent/sandboxinit"
	"github.com/cordon-sandbox/cordon/agent/startup"
	"github.com/cordon-sandbox/cordon/agent/vminit"
)

func main() {
	if vminit.IsGuest() {
		// A microVM's init (the microvm tier).
		os.Exit(vminit.Main(func(env []string, opts startup.Options) (func() int, int) {
			return agent.Start(env, false, os.Stdout, os.Stderr, opts)
		}))
	}
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
		case agent.InstallArg:
			if len(os.Args) != 3 {
				fmt.Fprintf(os.Stderr, "usage: cordon-agent %s DEST\n", agent.InstallArg)
				os.Exit(2)
			}
			if err := agent.Install(os.Args[2]); err != nil {
				fmt.Fprintf(os.Stderr, "cordon-agent: install: %v\n", err)
				os.Exit(1)
			}
			os.Exit(0)
		case agent.AccountsArg:
			uid, err := strconv.Atoi(os.Args[min(2, len(os.Args)-1)])
			if len(os.Args) != 4 || err != nil {
				fmt.Fprintf(os.Stderr, "usage: cordon-agent %s UID DIR\n", agent.AccountsArg)
				os.Exit(2)
			}
			if err := agent.Accounts(uid, os.Args[3]); err != nil {
				fmt.Fprintf(os.Stderr, "cordon-agent: accounts: %v\n", err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	// A token in a file is read while the agent is still the sandbox's
	// root (the file is its alone).
	if err := agent.TokenFileToFD(); err != nil {
		fmt.Fprintf(os.Stderr, "cordon-agent: refusing to start: %v\n", err)
		os.Exit(1)
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
