package host

import (
	"sort"
	"strconv"
	"strings"

	"github.com/cordon-sandbox/cordon/baseline"
	"github.com/cordon-sandbox/cordon/sandbox"
)

// AgentEnvOptions are what differs between tiers in an agent's environment.
type AgentEnvOptions struct {
	// TokenOnFD: the token arrives on descriptor TokenFD (a tier whose
	// configuration is written to disk), not in the environment.
	TokenOnFD bool
	TokenFD   int
	// OwnKernel: the sandbox has a kernel of its own (gVisor, a microVM),
	// so a socket cannot pass from it to the host, and its egress bridge
	// carries bytes rather than handing connections over.
	OwnKernel bool
	// PodNetwork: the agent serves TCP on a network of its own (a
	// cluster's pod), so it has neither socket nor egress bridge, and its
	// token comes in a file the tier names, never in the environment.
	PodNetwork bool
}

// AgentEnv is a sandbox agent's environment: its settings (the token, its
// socket, the egress proxy's, its workspace and the roots it reads and
// writes, the layout's directories among them) and what its commands
// inherit (baseline.CommandEnv, then the spec's Env).
func AgentEnv(l sandbox.Launch, uid int, layout []LayoutMount, o AgentEnvOptions) []string {
	env := baseline.CommandEnv(uid)
	for k, v := range l.Spec.Env {
		env[k] = v
	}
	p := baseline.EnvPrefix
	for k, v := range l.AgentEnv {
		env[p+k] = v
	}
	switch {
	case o.PodNetwork:
	case o.TokenOnFD:
		env[p+"TOKEN_FD"] = strconv.Itoa(o.TokenFD)
	default:
		env[p+"TOKEN"] = l.Token
	}
	if !o.PodNetwork {
		env[p+"SOCKET"] = baseline.AgentSocket
		env[p+"EGRESS_SOCKET"] = baseline.EgressSocket
		if !o.OwnKernel {
			env[p+"EGRESS_PASS"] = "1"
		}
	}
	env[p+"WORKSPACE"] = baseline.Workspace
	// The host may read any file of the sandbox's own view (which is all
	// it is: the host's secrets are masked, its other files absent), as
	// docker cp can: /etc/hostname, a build's output anywhere.
	var write []string
	for _, s := range baseline.ScratchDirs {
		if s.Path != baseline.Workspace {
			write = append(write, s.Path)
		}
	}
	read := []string{"/"}
	for _, m := range layout {
		read = append(read, m.Target)
		if !m.ReadOnly {
			write = append(write, m.Target)
		}
	}
	env[p+"WRITE_ROOTS"] = strings.Join(write, ":")
	env[p+"READ_ROOTS"] = strings.Join(read, ":")
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
