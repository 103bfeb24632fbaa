package oci

import "path"

// Tier names: the container tier runs crun or runc, the gvisor tier runsc.
const (
	Name   = "container"
	GVisor = "gvisor"
)

// StateName is the directory, below a state root (/run/cordon unless one
// is given), where the tier keeps its sandboxes when its runtime is
// runtime ("" for the tier's own choice). A runtime named by the operator
// has a directory of its own: one runtime cannot read another's state, so
// it could neither take back nor sweep the other's containers.
func StateName(tier, runtime string) string {
	name := "oci"
	if tier == GVisor {
		name = "gvisor"
	}
	if runtime == "" {
		return name
	}
	base := []byte(path.Base(runtime))
	for i, c := range base {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			base[i] = '_'
		}
	}
	return name + "-" + string(base)
}

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
