package oci

import (
	"github.com/cordon-sandbox/cordon/backend/host"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// commandsApart reports whether a sandbox of l has its workload's pids held
// apart from its agent's (host.HoldCommands): under a pids limit, on runc and
// crun, where the host's cgroups are v1 (a single thread can be moved into
// a v1 pids cgroup; cgroup2 would need a threaded subtree, which the
// machines this is tested on cannot make). Elsewhere the workload shares
// the cgroup's limit with the agent's headroom, and the agent keeps spare
// threads against a fork bomb.
func (b *Backend) commandsApart(l sandbox.Limits) bool {
	return l.Pids > 0 && !b.gvisor() && host.PidsV1() != ""
}
