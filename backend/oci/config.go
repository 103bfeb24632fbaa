package oci

// Tier names: the container tier runs crun or runc, the gvisor tier runsc.
const (
	Name   = "container"
	GVisor = "gvisor"
)

// Config configures the backend.
type Config struct {
	// Tier is the tier name: Name (the default) or GVisor.
	Tier string
	// Runtime is the OCI runtime: a path, or a name looked up in PATH;
	// empty means crun, then runc (runsc for the gvisor tier).
	Runtime string
	// Platform is gVisor's platform; empty probes systrap, then ptrace
	// (its kvm platform hangs on nested-virtualisation hosts).
	Platform string
	// AgentPath is the cordon-agent binary; empty means agentbin.Find.
	AgentPath string
	// StateDir holds each sandbox's bundle and sockets, and the runtime's
	// own state (under "runtime"); empty means /run/cordon/oci.
	StateDir string
	// Detached sandboxes outlive the process that created them (a daemon
	// that restarts takes them back with Adopt). Otherwise a sandbox's
	// agent stops, and the sandbox with it, once its creator is gone (its
	// lifeline closes), and the next process to start one on this state
	// directory sweeps what a creator that died left.
	Detached bool
}
