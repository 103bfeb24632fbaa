// Package startup is what a program that starts the agent in its own
// process (cordon-agent's main, the process tier's init) hands it: the
// agent's Options and the helpers that make them. It does not link the
// agent, so that the host, which shares the init's configuration types
// (package sandboxinit), never links the agent's server.
package startup

import (
	"net"
	"os"
)

// Options are what an embedding (the process tier's init) adds to Run.
type Options struct {
	// CommandThread, when set, runs every fork of a command on one
	// dedicated thread (see NewCommandThread): confinement that the kernel
	// applies per thread (the bounding set, Landlock without thread sync)
	// reaches all commands from there, while the agent's other threads
	// stay able to inspect them.
	CommandThread func(func())
	// CommandThreadID is CommandThread's thread's id, which the ready
	// record tells the host (wire.ReadyRecord.CommandThread).
	CommandThreadID int
	// Ready, when set, is called once the agent listens, with the
	// encoded wire.ReadyRecord for the host.
	Ready func(record []byte)
	// Listener, when set, is what the agent serves on instead of listening
	// itself (CORDON_AGENT_SOCKET, _BIND and _PORT are then not used for
	// it): the process tier's host makes the socket, so that its directory
	// can be read-only to the workload from the start.
	Listener net.Listener
	// OOMScore, when set, is this process's oom_score_adj, open
	// (OpenOOMScore): every command then starts at a score above the
	// agent's, so that out of memory the kernel kills a command first.
	OOMScore *os.File
	// Lifeline, when set, is a pipe whose other end the host holds: at its
	// end of file the host is gone, and the agent stops its commands and
	// exits, as on SIGTERM (a container runtime's sandbox has no
	// parent-death signal to die with its creator by).
	Lifeline *os.File
}
