// Command cordon-agent runs inside every cordon sandbox and serves the agent
// wire to the host. It is configured only through CORDON_AGENT_* variables.
package main

import (
	"os"

	"github.com/cordon-sandbox/cordon/agent"
)

func main() {
	os.Exit(agent.Main(os.Stdout, os.Stderr))
}
